// Package artifact collects the files a job left in its sandbox's /workspace that its outputs
// match, and stores them in the fleet's object store bucket as <tenant>/<job>/<attempt>/<path>; it also
// removes what no settlement will list.
//
// Invariants:
//   - Files are read only after the program and every process of it ended (sandbox.FileReader),
//     in path order, never through a link; what is read is streamed into the bucket, so memory
//     stays bounded whatever the files' size.
//   - artifact_files and artifact_bytes bound what is kept: the first file that would pass either
//     ends the collection, and the settlement says artifacts_truncated. So do the walk's own
//     bounds (sandbox.MaxWalkDepth, sandbox.MaxWalkEntries): the files before them are kept.
//   - Every listed object can be fetched by the name listed: a file whose path is not valid
//     UTF-8 is skipped (JSON would list it with U+FFFD) and the settlement says
//     artifacts_truncated.
//   - Before its puts the attempt records the names of every object it will store in its
//     manifest, the object <tenant>/<job>/<attempt> (never an artifact's name: a path is not empty), and
//     before each put it checks that its lease is valid, as for pages. So whoever settles the job
//     finds every object any attempt may have stored, without listing the bucket.
//   - G4 for artifacts: what the settlement lists is what the bucket holds. The attempt that
//     settles removes, before it settles, every object in any attempt's manifest that it does not
//     list, and the manifests once its settlement is stored; an attempt whose settlement is
//     refused removes its own. A put in flight when a lease's trust window closes can still land
//     after a takeover swept; such an object is listed by no settlement and ends with the
//     bucket's TTL.
package artifact
