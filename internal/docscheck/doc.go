// Package docscheck holds the test of jobfence's documentation, README.md,
// CHANGELOG.md and every Markdown file under docs/. See docs/testing.md.
//
// The test checks that every relative link and #anchor resolves (anchors
// as GitHub makes them from headings: lowercase, spaces to '-',
// punctuation dropped, a repeated heading suffixed -1, -2, ...), that each
// package doc's "docs/....md" reference names an existing guide, that the
// README stays a front page (at most 300 lines), and that every Go snippet
// compiles: all of them are written into one throwaway module that
// replaces github.com/jobfence/jobfence with this repository, and checked
// with one offline `go vet ./...` (skipped with -short).
//
// Snippets are the fenced blocks whose info string starts with "go":
//
//   - A snippet that starts with a package clause (after comments) is a
//     full file. If its first line is a comment naming a path ("//
//     signup/signup_test.go"), it is written there, so the snippets of one
//     Markdown file that name the same directory form one package (a
//     package and its test, say); otherwise it gets a directory of its own.
//   - Any other snippet is a fragment, compiled in a directory of its own:
//     declarations at the top level, statements in the body of a function,
//     or leading declarations followed by statements. Every variable the
//     statements declare at their top level is used (`_ = v`), imports are
//     added for the packages the fragment names (the table in
//     knownPackages), and the names it uses but does not declare come from
//     the givens: the standard ones in standardGivens (ctx, pool, client, jobs,
//     reg, tx, job of type *worker.Job[SendInvoice], ...), and those of an
//     HTML comment right before the fence, `<!-- given: Go declarations
//     -->`, which GitHub does not show.
//   - A snippet whose info string has the word "not-compiled" ("```go
//     not-compiled") is skipped: code of another library (River, Asynq)
//     shown for comparison.
package docscheck
