package queue_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jobfence/jobfence/queue"
)

// TestValidateTags: the rules (count, length, characters) with messages
// that name the tag and the rule, each wrapping ErrBadTag.
func TestValidateTags(t *testing.T) {
	for _, ok := range [][]string{nil, {"a"}, {"customer:c1", "region.eu-west_1", strings.Repeat("x", queue.MaxTagLen)},
		make16("t")} {
		if err := queue.ValidateTags(ok); err != nil {
			t.Errorf("ValidateTags(%q) = %v, want nil", ok, err)
		}
	}
	for _, tt := range []struct {
		tags []string
		want string
	}{
		{append(make16("t"), "one-more"), "jobfence: invalid enqueue params: Tags has 17 tags: at most 16"},
		{[]string{"ok", ""}, `Tags tag 1 ("") is 0 bytes long: a tag is 1 to 100 characters`},
		{[]string{strings.Repeat("y", 101)}, `is 101 bytes long: a tag is 1 to 100 characters`},
		{[]string{"a b"}, `Tags tag 0 ("a b") holds ' ': a tag is made of A-Z a-z 0-9 _ . : -`},
		{[]string{"x,y"}, `holds ','`},
		{[]string{"café"}, `holds 'é'`},
		{[]string{"<script>"}, `holds '<'`},
	} {
		err := queue.ValidateTags(tt.tags)
		if !errors.Is(err, queue.ErrBadTag) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ValidateTags(%q) = %v, want ErrBadTag with %q", tt.tags, err, tt.want)
		}
		p := queue.EnqueueParams{Kind: "k", Tags: tt.tags}.WithDefaults()
		if err := p.Validate(); !errors.Is(err, queue.ErrBadTag) {
			t.Errorf("Validate with tags %q = %v, want ErrBadTag", tt.tags, err)
		}
	}
}

func make16(prefix string) []string {
	var out []string
	for i := range queue.MaxTags {
		out = append(out, prefix+string(rune('a'+i)))
	}
	return out
}

type taggedArgs struct{ Customer string }

func (taggedArgs) Kind() string { return "tagged" }
func (taggedArgs) InsertOpts() queue.InsertOpts {
	return queue.InsertOpts{Tags: []string{"billing", "type"}}
}
func (a taggedArgs) Tags() []string { return []string{"customer:" + a.Customer, "billing"} }

// TestParamsMergeTags: the call's tags, then the type's (InsertOpts),
// then the value's (Tags()), each once; a type without either keeps the
// call's slice as it is.
func TestParamsMergeTags(t *testing.T) {
	p, err := queue.Params(taggedArgs{Customer: "c1"}, &queue.InsertOpts{Tags: []string{"urgent", "billing"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"urgent", "billing", "type", "customer:c1"}; !slices.Equal(p.Tags, want) {
		t.Fatalf("tags %q, want %q", p.Tags, want)
	}
	p, err = queue.Params(taggedArgs{Customer: "c2"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"billing", "type", "customer:c2"}; !slices.Equal(p.Tags, want) {
		t.Fatalf("tags %q, want %q", p.Tags, want)
	}
	if got := queue.MergeTags(nil, nil); got != nil {
		t.Fatalf("MergeTags(nil, nil) = %q, want nil", got)
	}
	if got := queue.MergeTags([]string{"a", "a", "b"}, nil); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("MergeTags dropped no duplicate: %q", got)
	}
}
