package wire

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// Files the monitor keeps in its socket directory. The names are short so that
// the directory's path can be long: sockets are bound relative to it.
const (
	AttachSocket  = "attach"      // SOCK_SEQPACKET: frames below, both ways
	ControlSocket = "ctl"         // SOCK_SEQPACKET: one request, one reply
	ConsoleSocket = "console"     // runc's --console-socket, gone once the pty master arrived
	PIDFile       = "pid"         // runc's --pid-file
	RuntimeLog    = "runtime.log" // runc's --log, so its warnings stay out of the container's stderr
	// CreatorFile holds the pid of the process that runs the container's
	// create (a monitor's first image, a join helper), the leader of its
	// process group, while the create runs: a daemon that rolls back a
	// create cut short finds it here, never by a name.
	CreatorFile = "creator"
)

// JoinSocket is the SOCK_SEQPACKET socket in a shared monitor's join
// directory. A connection is one container to create: the daemon sends
// the container's monitor arguments (Config.Args) separated by NUL bytes,
// and GoMessage once the container's bundle is complete; the monitor
// answers HelperMessage, then its join helper answers on the same
// connection as a new monitor answers on its sync pipe.
const JoinSocket = "join"

// GoMessage tells a join helper that the bundle is complete: the helper
// starts and prepares while the daemon writes it, and runs the runtime's
// create only once this comes. The end of the connection instead, or
// anything else, means the daemon gave the container up; so does nothing
// within GoTimeout.
const GoMessage = "go"

// GoTimeout bounds a join helper's wait for GoMessage.
const GoTimeout = time.Minute

// Frames on the attach socket. Every message starts with one of these bytes;
// SOCK_SEQPACKET keeps message boundaries, so there is no length field.
const (
	FrameStdout     byte = 'o' // monitor → client: container stdout (all output, with a tty)
	FrameStderr     byte = 'e' // monitor → client: container stderr
	FrameStdin      byte = 'i' // client → monitor: bytes for the container's stdin
	FrameStdinClose byte = 'c' // client → monitor: the client's stdin ended
	FrameResize     byte = 'r' // client → monitor: rows, cols as two big-endian uint16
)

// MaxPayload is the largest payload of one frame, either way. The monitor
// reads the container's output in pieces of this size.
const MaxPayload = 16 * 1024

// Requests and replies on the control socket.
const (
	RequestReopenLog = "reopen-log"
	// RequestWait gets no reply: the monitor closes the connection once
	// the container's exit file is written and its sockets are gone, or
	// when the monitor dies.
	RequestWait      = "wait"
	ReplyOK          = "ok"
	replyErrorPrefix = "error "
)

// ReplyError is the control socket's answer to a request that failed.
func ReplyError(err error) string { return replyErrorPrefix + err.Error() }

// ParseReply turns a control socket answer into nil or an error.
func ParseReply(reply string) error {
	if reply == ReplyOK {
		return nil
	}
	if msg, ok := strings.CutPrefix(reply, replyErrorPrefix); ok {
		return errors.New(msg)
	}
	return errors.New("unexpected reply " + strconv.Quote(reply))
}

// ResizePayload encodes a terminal size for FrameResize.
func ResizePayload(rows, cols uint16) [4]byte {
	return [4]byte{byte(rows >> 8), byte(rows), byte(cols >> 8), byte(cols)}
}

// ParseResize decodes the payload of a FrameResize.
func ParseResize(p []byte) (rows, cols uint16, ok bool) {
	if len(p) != 4 {
		return 0, 0, false
	}
	return uint16(p[0])<<8 | uint16(p[1]), uint16(p[2])<<8 | uint16(p[3]), true
}

// The sync pipe carries exactly one message, then the monitor closes it.
const (
	syncCreated = "created "
	syncFailed  = "failed "
)

// CreatedMessage is what the monitor writes when runc create succeeded.
func CreatedMessage(containerPID, monitorPID int) []byte {
	return []byte(syncCreated + strconv.Itoa(containerPID) + " " + strconv.Itoa(monitorPID) + "\n")
}

// FailedMessage is what the monitor writes when it could not create the
// container; msg is usually the runtime's stderr.
func FailedMessage(msg string) []byte {
	return []byte(syncFailed + strings.TrimSpace(msg) + "\n")
}

const syncHelper = "helper "

// HelperMessage is a shared monitor's first answer to a join: the pid of
// the helper process that runs the create, the leader of its own process
// group, which the daemon kills when its deadline passes.
func HelperMessage(pid int) []byte {
	return []byte(syncHelper + strconv.Itoa(pid) + "\n")
}

// ParseHelper reads HelperMessage.
func ParseHelper(msg []byte) (int, error) {
	rest, ok := strings.CutPrefix(string(msg), syncHelper)
	pid, err := strconv.Atoi(strings.TrimSuffix(rest, "\n"))
	if !ok || err != nil || pid <= 0 {
		return 0, errors.New("monitor join: unexpected message " + strconv.Quote(string(msg)))
	}
	return pid, nil
}

// ErrCreateFailed wraps the monitor's report of a failed create.
var ErrCreateFailed = errors.New("create failed")

// ParseSync reads the sync pipe's message. A failure report comes back as an
// error wrapping ErrCreateFailed, with the monitor's text.
func ParseSync(msg []byte) (containerPID, monitorPID int, err error) {
	s := string(msg)
	if rest, ok := strings.CutPrefix(s, syncFailed); ok {
		return 0, 0, &failedError{msg: strings.TrimSpace(rest)}
	}
	rest, ok := strings.CutPrefix(s, syncCreated)
	if !ok || !strings.HasSuffix(rest, "\n") {
		return 0, 0, errors.New("monitor sync: unexpected message " + strconv.Quote(s))
	}
	c, m, _ := strings.Cut(strings.TrimSuffix(rest, "\n"), " ")
	if containerPID, err = strconv.Atoi(c); err != nil || containerPID <= 0 {
		return 0, 0, errors.New("monitor sync: bad container pid in " + strconv.Quote(s))
	}
	if monitorPID, err = strconv.Atoi(m); err != nil || monitorPID <= 0 {
		return 0, 0, errors.New("monitor sync: bad monitor pid in " + strconv.Quote(s))
	}
	return containerPID, monitorPID, nil
}

type failedError struct{ msg string }

func (e *failedError) Error() string        { return "create failed: " + e.msg }
func (e *failedError) Is(target error) bool { return target == ErrCreateFailed }

// ExitStatus is the content of the exit file.
type ExitStatus struct {
	Code   int       // exit code; 128+n for a death by signal n
	At     time.Time // when the monitor reaped the container's init
	Reason string    // a hint when the monitor knows one ("OOMKilled"), else empty
}

// Marshal renders the exit file: one key=value a line.
func (e ExitStatus) Marshal() []byte {
	b := make([]byte, 0, 96)
	b = append(b, "exit_code="...)
	b = strconv.AppendInt(b, int64(e.Code), 10)
	b = append(b, "\nexited_at="...)
	b = e.At.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '\n')
	if e.Reason != "" {
		b = append(b, "reason="...)
		b = append(b, e.Reason...)
		b = append(b, '\n')
	}
	return b
}

// ParseExit reads an exit file written by Marshal. Unknown keys are skipped so
// that a newer monitor can add some.
func ParseExit(b []byte) (ExitStatus, error) {
	var e ExitStatus
	var haveCode, haveAt bool
	for _, line := range strings.Split(string(b), "\n") {
		key, value, _ := strings.Cut(line, "=")
		var err error
		switch key {
		case "exit_code":
			e.Code, err = strconv.Atoi(value)
			haveCode = err == nil
		case "exited_at":
			e.At, err = time.Parse(time.RFC3339Nano, value)
			haveAt = err == nil
		case "reason":
			e.Reason = value
		}
		if err != nil {
			return e, errors.New("exit file: " + key + ": " + err.Error())
		}
	}
	if !haveCode || !haveAt {
		return e, errors.New("exit file: exit_code or exited_at missing")
	}
	return e, nil
}
