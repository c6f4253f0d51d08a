package store

import (
	"strconv"
	"time"

	"github.com/gpuplane/gpuplane/internal/errs"
)

// Etag is derived from a row's version and update time, so a resource that
// was deleted and created again under the same name gets new etags.
func Etag(version int64, updated time.Time) string {
	return strconv.FormatInt(version, 10) + "-" + strconv.FormatInt(updated.UnixMicro(), 36)
}

// CheckEtag returns ABORTED when want is set and differs from current.
func CheckEtag(resource, want, current string) error {
	if want != "" && want != current {
		return errs.EtagMismatch(resource)
	}
	return nil
}
