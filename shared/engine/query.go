package engine

import (
	"github.com/oklog/ulid/v2"

	"github.com/slicework/slicework/shared/job"
)

// ValidateQuery checks a job search (GRAB_WITH_SEARCH; Gearman HQ's "find
// a job") before it reaches the store: kind a valid kind name, state a
// known state, tag a valid tag, parent a job id, CreatedAfter before
// CreatedBefore when both are set, and a limit of 0..job.MaxPageSize. It
// returns a *ValidationError naming the field (wrapping job.ErrInvalid),
// or nil. The cursor is opaque: the store checks it.
func ValidateQuery(q job.Query) error {
	switch {
	case q.Kind != "" && !ValidName(q.Kind):
		return invalid("kind", "%q is not a kind name (lower-case letters, digits and _.-, starting with a letter, at most 64)", q.Kind)
	case q.State != "" && !q.State.Valid():
		return invalid("state", "%q is not one of %v", q.State, job.AllStates)
	case q.Tag != "" && !tagPattern.MatchString(q.Tag):
		return invalid("tag", "%q is not a tag (1-64 letters, digits and _.:=/-)", q.Tag)
	case q.Parent != "" && !validID(q.Parent):
		return invalid("parent", "%q is not a job id (26-character ULID)", q.Parent)
	case !q.CreatedAfter.IsZero() && !q.CreatedBefore.IsZero() && !q.CreatedAfter.Before(q.CreatedBefore):
		return invalid("created_after", "%s is not before created_before %s", q.CreatedAfter.Format("2006-01-02T15:04:05.999999999Z07:00"), q.CreatedBefore.Format("2006-01-02T15:04:05.999999999Z07:00"))
	case q.Limit < 0 || q.Limit > job.MaxPageSize:
		return invalid("limit", "%d is not in 0..%d", q.Limit, job.MaxPageSize)
	}
	return nil
}

// validID reports whether s has the form of a job id (job.NewID).
func validID(s string) bool {
	_, err := ulid.ParseStrict(s)
	return err == nil
}
