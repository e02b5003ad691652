package monitor

import (
	"bytes"
	"errors"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxIovecs bounds one writev: 3 vectors a line (prefix, content, newline),
// so up to 32 lines go out in one system call.
const maxIovecs = 96

// logWriter writes container output in the CRI log format the kubelet parses:
//
//	2016-10-06T00:17:09.669794202Z stdout F a whole line
//	2016-10-06T00:17:09.669794202Z stdout P the first part of a line
//
// Content is written as soon as it is read, so nothing is held back while a
// container prints a prompt without a newline: the unfinished tail of a read,
// and any run of maxLine bytes without a newline, is written with the tag P,
// and the kubelet joins P parts up to the next F. All lines of one read share
// one timestamp, which is also what keeps this free of allocations.
type logWriter struct {
	path    string
	fd      int // -1: no log file, the output is dropped
	maxLine int

	prefix  [2][]byte // [0] ends in " F ", [1] in " P "
	storage [2][64]byte
	// iov is scratch space, empty between two writes: the monitors of a
	// shared process use their pool's one (pool.add) rather than one each;
	// a writer outside a pool makes its own at its first write.
	iov *[maxIovecs]unix.Iovec
	n   int // vectors in use
}

var newline = []byte{'\n'}

func newLogWriter(path string, maxLine int) *logWriter {
	w := &logWriter{path: path, fd: -1, maxLine: maxLine}
	w.prefix[0] = w.storage[0][:0]
	w.prefix[1] = w.storage[1][:0]
	return w
}

// open opens the log file; without a path there is none to open. It is
// reopen with no file open yet.
func (w *logWriter) open() error { return w.reopen() }

func openLogFile(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND|unix.O_CLOEXEC, 0o640)
	if err != nil {
		return -1, errors.New("open log " + path + ": " + err.Error())
	}
	return fd, nil
}

// reopen starts a new file at the log's path; the kubelet has renamed the old
// one. Until the new file is open the old one keeps receiving lines, so a
// failed reopen loses nothing.
func (w *logWriter) reopen() error {
	if w.path == "" {
		return nil
	}
	fd, err := openLogFile(w.path)
	if err != nil {
		return err
	}
	if w.fd >= 0 {
		unix.Close(w.fd)
	}
	w.fd = fd
	return nil
}

func (w *logWriter) close() {
	if w.fd >= 0 {
		unix.Close(w.fd)
		w.fd = -1
	}
}

// write logs one read's worth of a stream ("stdout" or "stderr").
func (w *logWriter) write(stream string, p []byte, now time.Time) error {
	if w.fd < 0 || len(p) == 0 {
		return nil
	}
	if w.iov == nil {
		w.iov = new([maxIovecs]unix.Iovec)
	}
	w.setPrefixes(stream, now)
	for len(p) > 0 {
		line, rest, full := cutLine(p, w.maxLine)
		if w.n+3 > maxIovecs {
			if err := w.flush(); err != nil {
				return err
			}
		}
		tag := 1
		if full {
			tag = 0
		}
		w.add(w.prefix[tag])
		w.add(line)
		w.add(newline)
		p = rest
	}
	return w.flush()
}

// cutLine takes the next log entry off p: a whole line (full) without its
// newline, or a part of at most maxLine bytes that has no newline in it.
func cutLine(p []byte, maxLine int) (line, rest []byte, full bool) {
	if i := bytes.IndexByte(p, '\n'); i >= 0 && i <= maxLine {
		return p[:i], p[i+1:], true
	}
	if len(p) > maxLine {
		return p[:maxLine], p[maxLine:], false
	}
	return p, nil, false
}

func (w *logWriter) setPrefixes(stream string, now time.Time) {
	b := now.UTC().AppendFormat(w.prefix[0][:0], time.RFC3339Nano)
	b = append(b, ' ')
	b = append(b, stream...)
	b = append(b, " F "...)
	w.prefix[0] = b
	w.prefix[1] = append(w.prefix[1][:0], b...)
	w.prefix[1][len(b)-2] = 'P'
}

func (w *logWriter) add(b []byte) {
	if len(b) == 0 {
		return
	}
	w.iov[w.n] = unix.Iovec{Base: &b[0]}
	w.iov[w.n].SetLen(len(b))
	w.n++
}

// flush writes the collected vectors with writev; x/sys's Writev would
// allocate its own vector on every call.
func (w *logWriter) flush() error {
	iov := w.iov[:w.n]
	w.n = 0
	for len(iov) > 0 {
		r, _, errno := unix.Syscall(unix.SYS_WRITEV, uintptr(w.fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return errors.New("write log " + w.path + ": " + errno.Error())
		}
		iov = advance(iov, int(r))
	}
	return nil
}

// advance drops n written bytes from the front of iov.
func advance(iov []unix.Iovec, n int) []unix.Iovec {
	for len(iov) > 0 && n >= int(iov[0].Len) {
		n -= int(iov[0].Len)
		iov = iov[1:]
	}
	if len(iov) > 0 && n > 0 {
		iov[0].Base = (*byte)(unsafe.Add(unsafe.Pointer(iov[0].Base), n))
		iov[0].SetLen(int(iov[0].Len) - n)
	}
	return iov
}
