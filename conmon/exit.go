package conmon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/minicri/minicri/conmon/wire"
)

// ReadExit reads the exit file a monitor wrote when its container exited;
// ok is false while there is none. The monitor writes it with a rename, so
// a file that is there is whole, and it stays after a daemon restart.
func ReadExit(path string) (e Exit, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Exit{}, false, nil
	}
	if err != nil {
		return Exit{}, false, fmt.Errorf("read exit file: %w", err)
	}
	s, err := wire.ParseExit(b)
	if err != nil {
		return Exit{}, false, fmt.Errorf("%s: %w", path, err)
	}
	return Exit{Code: s.Code, At: s.At, Reason: s.Reason}, true, nil
}
