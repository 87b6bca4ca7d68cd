// Package release makes the repository's two modules releasable together and builds a module
// proxy from the working tree, so a test can install them as a user outside the repository would.
//
// # Modules and tags
//
// The root module github.com/runfleet/runfleet (the client, job and protocol) and the nested module
// .../fleet (cmd/, internal/ and deploy/: the worker, gateway and submit) are released in lockstep:
// one version for both, tagged vX.Y.Z and fleet/vX.Y.Z on one commit. The fleet's go.mod requires
// the client at that version and has no replace directive: `go install pkg@version` refuses a
// module with one. go.work ties the two directories for development, and replaces each required
// sibling at that version with its directory: the go command reads the go.mod of every version a
// module requires, a workspace module's too, and no proxy serves a version before it is published.
//
// # Hashes, root first
//
// A go.sum holds the hashes of the sibling versions its module requires (the `h1:` hash of the
// module's zip and of its go.mod, as golang.org/x/mod's zip and sumdb/dirhash compute them), so
// that a module builds as the main module outside the workspace. A module's zip holds its own
// go.sum, so a module's hash is known only once the hashes it holds are written: [SetVersion]
// writes the modules in the order of [Modules], each after every module it requires.
//
// # What a zip holds
//
// The files git tracks, plus untracked files git does not ignore, as they are in the working tree:
// never build output or the sandbox root fs under var/. A release is made from a clean tree, so
// its zips are the tagged commit's.
package release
