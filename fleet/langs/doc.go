// Package langs holds the language manifests shipped with runfleet, one JSON file each (bash,
// C, C++, Go, Java, Rust): a worker serves them when given this directory (`worker --langs
// fleet/langs`) and a root file system or image holding their toolchains (`make langs`). The
// format is package profile's Manifest, described in docs/protocol.md ("Languages"). The
// package's test runs every manifest's test program on the namespace and Docker providers.
package langs
