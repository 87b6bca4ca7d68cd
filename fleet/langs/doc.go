// Package langs holds the language manifests shipped with runfleet, one JSON file each (bash,
// C, C++, Go, Java, Rust). `make langs` copies them into the root file system (and image) it
// builds with their toolchains, at /usr/share/runfleet/langs, where a worker finds them with no
// flag; `worker --langs fleet/langs` serves them on any root fs that holds the toolchains. The
// format is package profile's Manifest, described in docs/protocol.md ("Languages"). The
// package's test runs every manifest's test program on the namespace and Docker providers.
package langs
