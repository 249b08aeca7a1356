package dashboard_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jobfence/jobfence/dashboard"
)

// TestEncryptedArgsPages: a dashboard without the key shows an encrypted
// job's args as "encrypted (key k1)" on its page and in the jobs list,
// and says its unique key cannot be told apart; one given the key
// (Options.Encryption) shows them in clear and tells the key was made of
// the kind and args.
func TestEncryptedArgsPages(t *testing.T) {
	t.Parallel()
	hidden := newDash(t, dashboard.Options{})
	id := hidden.enqueueEncrypted(`{"card":"4111-1111"}`)
	page := hidden.getOK(fmt.Sprintf("/jobs/%d", id))
	list := hidden.getOK("/jobs?kind=pay")
	if !strings.Contains(page, "encrypted (key k1)") || !strings.Contains(list, "encrypted (key k1)") ||
		strings.Contains(page+list, "4111") || strings.Contains(page+list, "jobfence-encrypted") {
		t.Fatalf("without the key, the page or the list shows more than encrypted (key k1):\n%s\n%s", page, list)
	}
	if !strings.Contains(page, "the args are encrypted and this dashboard lacks their key") {
		t.Errorf("without the key, the unique key's parts are not explained:\n%s", page)
	}

	shown := newDash(t, dashboard.Options{Encryption: encRing(t)})
	id = shown.enqueueEncrypted(`{"card":"4111-2222"}`)
	page = shown.getOK(fmt.Sprintf("/jobs/%d", id))
	list = shown.getOK("/jobs?kind=pay")
	if !strings.Contains(page, "4111-2222") || !strings.Contains(list, "4111-2222") || strings.Contains(page, "encrypted (key") {
		t.Fatalf("with the key, the page or the list does not show the args:\n%s\n%s", page, list)
	}
	if !strings.Contains(page, "kind and args") {
		t.Errorf("with the key, the unique key is not told to be of the kind and args:\n%s", page)
	}
}
