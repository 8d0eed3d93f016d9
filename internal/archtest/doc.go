// Package archtest holds the test that keeps the package layout of docs/architecture.md true.
//
// It has no code of its own: its test parses the imports of every non-test Go file of the
// module and fails, naming the file and the rule, when
//   - internal/restart imports anything that does I/O or talks to a cluster (it is the pure
//     domain: facts in, decisions out), and internal/onchange likewise, but for the types
//     of Nomad's api;
//   - a product package imports nomadsim, the simulated Nomad, outside the embedded demo
//     (internal/demo) and cmd/nomadsim;
//   - a file outside internal/simtest that is not a test imports internal/simtest;
//   - a package imports a project package that the architecture's table does not allow, or a
//     package appears that the table does not name (add it to the table in imports_test.go
//     and to docs/architecture.md together).
//
// The checks run with `go test ./internal/archtest/`.
package archtest
