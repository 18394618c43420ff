package dynamostore

// Test hooks.

// SetCrash makes s call fn at each point where a process could die between
// two writes ("unpark", "rollup", "sliced"); a non-nil error aborts the
// call there, as a crash would.
func SetCrash(s *Store, fn func(point string) error) { s.crash = fn }

// SetDueCap sets how many due scheduled jobs s reads before falling back.
func SetDueCap(s *Store, n int) { s.dueCap = n }
