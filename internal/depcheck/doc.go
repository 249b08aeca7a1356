// Package depcheck holds the test that a service gets only the backends it
// imports: a PostgreSQL-only program, built in a module of its own as a
// user's would be, links no Kafka, Redis or SQLite code. It has no code of
// its own.
package depcheck
