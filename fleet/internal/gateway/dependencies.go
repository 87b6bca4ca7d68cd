package gateway

import "github.com/runfleet/runfleet/fleet/internal/pydist"

// ReadDependencies lists the Python packages installed in the root fs at root (the profile's
// --rootfs, "/" for the host's): see pydist.Read. The dependency route answers from it when no
// worker announced its python3 profile's packages.
func ReadDependencies(root string) ([]Dependency, error) { return pydist.Read(root) }
