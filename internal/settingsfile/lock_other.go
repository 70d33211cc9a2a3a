//go:build !unix

package settingsfile

import (
	"errors"
	"os"
)

// canLock says whether tryLock works here: without file locks no temporary file can be told from a
// live writer's, and none is removed.
const canLock = false

func tryLock(*os.File) (bool, error) { return true, nil }

func openNoFollow(string) (*os.File, error) { return nil, errors.New("settingsfile: not supported") }
