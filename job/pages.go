package job

import "time"

// PageInterval is the page policy's one number. Output is cut into a page when page_bytes of one
// stream are buffered, or when the oldest buffered byte has waited PageInterval: a watcher sees
// output within PageInterval of the program writing it (plus the publish), and time-cut pages,
// which carry whatever both streams buffered, come at most once per PageInterval however chatty
// the program is.
const PageInterval = 150 * time.Millisecond

// PagesNeeded is how many pages a job may store under the page policy when it runs for its whole
// timeout: a time cut of both streams every PageInterval, the size cuts its output bound allows,
// and the last partial page of each stream. A job that does not set max_pages gets at least this
// many (up to the worker's maximum), so that chatty output never meets page_limit.
//
// Deprecated: internal to the fleet; will move in the next release.
func PagesNeeded(timeout time.Duration, outputBytes, pageBytes int64) int64 {
	cuts := int64(timeout/PageInterval) + 1
	return 2*cuts + outputBytes/max(pageBytes, 1) + 2
}
