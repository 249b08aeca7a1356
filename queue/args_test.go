package queue_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
)

type plainArgs struct{}

func (plainArgs) Kind() string { return "plain" }

type defaultedArgs struct{ N int }

func (defaultedArgs) Kind() string { return "defaulted" }

var typeDefaults = queue.InsertOpts{
	Queue: "billing", Priority: 3, ScheduledAt: time.Unix(1_000, 0), MaxAttempts: 5, UniqueKey: "type",
	Unique:   &queue.UniqueOpts{ByArgs: true},
	Metadata: map[string]string{"team": "billing", "tier": "gold"}, Timeout: 7 * time.Second, Deadline: time.Unix(2_000, 0),
	LimitKey: "type-key", DeleteOnComplete: true, Tags: []string{"type-tag"},
}

func (defaultedArgs) InsertOpts() queue.InsertOpts { return typeDefaults }

// uniqueness names the fields of InsertOpts that Merge takes as one.
var uniqueness = map[string]bool{"UniqueKey": true, "Unique": true}

// TestInsertOptsMergeEveryField: each field of InsertOpts set at the call
// overrides the args type's default, and each left zero takes it; a field
// added to InsertOpts that Merge forgets fails here.
func TestInsertOptsMergeEveryField(t *testing.T) {
	typ := reflect.TypeOf(queue.InsertOpts{})
	call := queue.InsertOpts{
		Queue: "urgent", Priority: 1, ScheduledAt: time.Unix(3_000, 0), MaxAttempts: 2, UniqueKey: "call",
		Unique:   &queue.UniqueOpts{ByQueue: true},
		Metadata: map[string]string{"extra": "x"}, Timeout: time.Second, Deadline: time.Unix(4_000, 0),
		LimitKey: "call-key", DeleteOnComplete: true, Tags: []string{"call-tag"},
	}
	for i := range typ.NumField() {
		f := typ.Field(i)
		if reflect.ValueOf(typeDefaults).Field(i).IsZero() || reflect.ValueOf(call).Field(i).IsZero() {
			t.Fatalf("field %s: set it in typeDefaults and call", f.Name)
		}
		// Only this field set at the call: it wins, every other is the type's.
		var one queue.InsertOpts
		reflect.ValueOf(&one).Elem().Field(i).Set(reflect.ValueOf(call).Field(i))
		got := queue.OptsOf(defaultedArgs{}, &one)
		for j := range typ.NumField() {
			g := reflect.ValueOf(got).Field(j).Interface()
			want := reflect.ValueOf(typeDefaults).Field(j).Interface()
			if j == i {
				want = reflect.ValueOf(call).Field(j).Interface()
			}
			if typ.Field(j).Name == "Metadata" && j == i {
				want = map[string]string{"team": "billing", "tier": "gold", "extra": "x"}
			}
			if typ.Field(j).Name == "Tags" && j == i {
				want = []string{"call-tag", "type-tag"} // merged, the call's first
			}
			// UniqueKey and Unique are one setting: either at the call
			// replaces both of the type's.
			if j != i && uniqueness[f.Name] && uniqueness[typ.Field(j).Name] {
				want = reflect.Zero(typ.Field(j).Type).Interface()
			}
			if !reflect.DeepEqual(g, want) {
				t.Errorf("%s set at the call: %s = %v, want %v", f.Name, typ.Field(j).Name, g, want)
			}
		}
	}
	// Nothing at the call: every default; args without defaults: the call's.
	if got := queue.OptsOf(defaultedArgs{}, nil); !reflect.DeepEqual(got, typeDefaults) {
		t.Errorf("no options: %+v, want the type's %+v", got, typeDefaults)
	}
	if got := queue.OptsOf(plainArgs{}, &call); !reflect.DeepEqual(got, call) {
		t.Errorf("args without defaults: %+v, want the call's %+v", got, call)
	}
	// The call's metadata wins key by key, and neither map is changed.
	got := queue.OptsOf(defaultedArgs{}, &queue.InsertOpts{Metadata: map[string]string{"tier": "silver"}})
	if want := map[string]string{"team": "billing", "tier": "silver"}; !reflect.DeepEqual(got.Metadata, want) ||
		typeDefaults.Metadata["tier"] != "gold" {
		t.Errorf("metadata %v, want %v with the type's unchanged", got.Metadata, want)
	}
}

// TestParamsTakeArgsDefaults: Params, which every typed insert goes
// through, fills EnqueueParams from the merged options.
func TestParamsTakeArgsDefaults(t *testing.T) {
	p, err := queue.Params(defaultedArgs{N: 1}, &queue.InsertOpts{Priority: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := queue.EnqueueParams{Kind: "defaulted", Args: []byte(`{"N":1}`), Queue: "billing", Priority: 2,
		ScheduledAt: typeDefaults.ScheduledAt, MaxAttempts: 5, UniqueKey: "type", Unique: typeDefaults.Unique, Metadata: typeDefaults.Metadata,
		Timeout: 7 * time.Second, Deadline: typeDefaults.Deadline, LimitKey: "type-key",
		DeleteOnComplete: true, Tags: []string{"type-tag"}}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("Params = %+v\nwant %+v", p, want)
	}
}
