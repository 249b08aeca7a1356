// Package migrations holds jobfence's schema as goose SQL migrations embedded
// in the binary.
//
// The migrations record their versions in a goose table of their own,
// VersionTable, so a service that runs goose for its own schema never
// collides with jobfence. FS is exported for services that run migrations in
// their own pipeline; Up, Down, Reset, Status and Version serve everyone else.
//
// Tables are created unqualified, in the first schema of the connection's
// search_path; add search_path=myschema to the URL to put them elsewhere.
package migrations
