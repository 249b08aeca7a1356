// Package m is the fixture of apicheck's tests: one of each kind of
// declaration, exported and not.
package m

import (
	"context"
	"errors"
	"io"
	"time"
)

// Color is a typed constant's type.
type Color int

// The colors, an iota group: each repeats the type.
const (
	Red Color = iota
	Green
	blue
)

// Untyped constants.
const (
	Name     = "m"
	MaxBytes = 1 << 20
	Timeout  = 10 * time.Second
	ratio    = 0.5
)

// Variables.
var (
	ErrGone  = errors.New("m: gone")
	ErrWrap  = fmt2("m: %w", ErrGone)
	Colors   = []Color{Red, Green}
	Default  = &Options{Size: 1}
	Count    int64
	Retries  = 3
	OnDone   = func(ctx context.Context, n int) error { return nil }
	internal = 3
)

func fmt2(string, error) error { return nil }

// Options is a struct with exported, unexported and embedded fields.
type Options struct {
	Size, Limit int `json:"size"`
	Hook        func(ctx context.Context, n int) error
	io.Reader
	*Base
	secret string
	hidden
}

// Base is embedded.
type Base struct{ ID int64 }

type hidden struct{ Visible int }

// Doer is an interface with a method, an embedded interface and an
// unexported method.
type Doer interface {
	io.Closer
	Do(ctx context.Context, name string, args ...any) (int, error)
	reset()
}

// Number is a constraint.
type Number interface {
	~int | ~int64 | float64
}

// Alias is an alias.
type Alias = Options

// Box is a generic type.
type Box[T any, K comparable] struct {
	Items map[K]T
	Ch    <-chan T
}

// Get is a method of a generic type.
func (b *Box[T, K]) Get(key K) (value T, ok bool) { return }

// Open is a function with named and grouped parameters.
func Open(ctx context.Context, a, b string, opts ...Options) (*Options, error) { return nil, nil }

// Sum is a generic function.
func Sum[N Number](xs []N) N { return 0 }

// Close is a method with a value receiver.
func (Options) Close() error { return nil }

func (h hidden) Exported() {}

func (o *Options) unexported() {}

func helper() {}
