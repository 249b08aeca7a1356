package jobfence

// Version is the release of jobfence this source is, without the leading
// "v" of its tag: "0.1.0" is tagged v0.1.0. It is the newest release
// heading in CHANGELOG.md (internal/apicheck checks that the two agree),
// so it moves only when a release is cut. `jobfence version` prints it
// beside the module version and VCS revision the Go toolchain stamped
// into the binary, which tell a build of another commit apart.
//
// Before 1.0, what a release may change is in docs/compatibility.md.
const Version = "0.1.0"
