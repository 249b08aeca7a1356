package queue

import (
	"errors"
	"fmt"
	"slices"
)

// The rules a job's tags (EnqueueParams.Tags) follow: at most MaxTags
// tags, each of 1 to MaxTagLen characters from A-Z, a-z, 0-9 and the
// four marks _ . : - (so a tag needs no escaping in a URL, a shell or a
// log line, and "customer:c1" or "region.eu-west" read as one word).
const (
	MaxTags   = 16
	MaxTagLen = 100
)

// ErrBadTag is wrapped by the error an insert returns for tags that break
// the rules (see MaxTags): nothing of the insert is stored.
var ErrBadTag = errors.New("jobfence: bad job tag")

// TagsProvider is implemented by an args type whose jobs carry tags of
// their own, computed from the args' value (a customer, a region): Params
// merges them after the call's InsertOpts.Tags and the type's
// InsertOptsProvider tags, dropping duplicates.
type TagsProvider interface {
	Tags() []string
}

// ValidateTags reports the first tag of tags that breaks the rules (see
// MaxTags) with an error wrapping ErrBadTag, which names the tag and the
// rule; nil when all keep them. Duplicates are allowed here: an insert
// stores each tag once.
func ValidateTags(tags []string) error {
	if len(tags) > MaxTags {
		return &InvalidParamsError{Field: "Tags", Reason: fmt.Sprintf("has %d tags: at most %d", len(tags), MaxTags), Err: ErrBadTag}
	}
	for i, t := range tags {
		if len(t) == 0 || len(t) > MaxTagLen {
			return &InvalidParamsError{Field: "Tags",
				Reason: fmt.Sprintf("tag %d (%q) is %d bytes long: a tag is 1 to %d characters", i, t, len(t), MaxTagLen), Err: ErrBadTag}
		}
		for _, r := range t {
			if !tagChar(r) {
				return &InvalidParamsError{Field: "Tags",
					Reason: fmt.Sprintf("tag %d (%q) holds %q: a tag is made of A-Z a-z 0-9 _ . : -", i, t, r), Err: ErrBadTag}
			}
		}
	}
	return nil
}

// tagChar says whether r may be in a tag.
func tagChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == ':' || r == '-'
}

// MergeTags returns own followed by the tags of add that own lacks, each
// once. It never modifies either slice, and returns own itself when add
// is empty and own has no duplicates (an insert without tags allocates
// nothing).
func MergeTags(own, add []string) []string {
	if len(add) == 0 && !hasDuplicate(own) {
		return own
	}
	out := make([]string, 0, len(own)+len(add))
	for _, list := range [][]string{own, add} {
		for _, t := range list {
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	return out
}

// hasDuplicate says whether tags holds a tag twice; tags are few (see
// MaxTags), so a quadratic look costs less than a map.
func hasDuplicate(tags []string) bool {
	for i, t := range tags {
		if slices.Contains(tags[i+1:], t) {
			return true
		}
	}
	return false
}
