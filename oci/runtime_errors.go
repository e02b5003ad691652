package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
)

// RuntimeError is a failed runtime call. Its message is the runtime's own
// ("runc start abc: container does not exist"), so that a user sees what runc
// or crun said. It matches ErrNotFound when the runtime does not know the
// container, and the context's error when the call ran out of time.
type RuntimeError struct {
	Runtime string // handler or binary name
	Op      string // subcommand: "start", "state", ...
	ID      string // container ID, "" for list
	Message string // the runtime's message, "" when it said nothing
	Err     error  // the exit status, or why the runtime could not run

	notFound bool
	ctxErr   error
}

func (e *RuntimeError) Error() string {
	s := e.Runtime + " " + e.Op
	if e.ID != "" {
		s += " " + e.ID
	}
	switch {
	case e.ctxErr != nil:
		s += ": " + e.ctxErr.Error()
		if e.Message != "" {
			s += ": " + e.Message
		}
	case e.Message != "":
		s += ": " + e.Message
	default:
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *RuntimeError) Unwrap() []error {
	errs := []error{e.Err}
	if e.notFound {
		errs = append(errs, ErrNotFound)
	}
	if e.ctxErr != nil {
		errs = append(errs, e.ctxErr)
	}
	return errs
}

func (r *Runtime) failure(ctx context.Context, op, id, message string, err error) error {
	return &RuntimeError{
		Runtime:  r.name(),
		Op:       op,
		ID:       id,
		Message:  message,
		Err:      err,
		notFound: id != "" && isNotFoundMessage(message, id),
		ctxErr:   ctx.Err(),
	}
}

// isNotFoundMessage recognises "the runtime has no such container": runc says
// "container does not exist"; crun cannot open the container's state
// directory or status file under its root.
func isNotFoundMessage(msg, id string) bool {
	if strings.Contains(msg, "container does not exist") {
		return true
	}
	return strings.Contains(msg, "No such file or directory") &&
		(strings.Contains(msg, "/"+id+"/") || strings.Contains(msg, "/"+id+"'") || strings.Contains(msg, "/"+id+"`"))
}

// runtimeMessage extracts what a runtime said on stderr. runc prints its
// error plainly after logging it (text or JSON log lines); crun prints it
// plainly. Plain lines win; failing those, the messages of error-level log
// lines.
func runtimeMessage(stderr []byte) string {
	var plain, logged []string
	for _, line := range strings.Split(string(stderr), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if msg, level, ok := parseLogLine(line); ok {
			if isErrorLevel(level) {
				logged = append(logged, msg)
			}
			continue
		}
		plain = append(plain, line)
	}
	if len(plain) > 0 {
		return strings.Join(plain, "; ")
	}
	return strings.Join(logged, "; ")
}

// lastLogError is the last error-level message of a runtime's JSON log
// (--log): the runtime's final word on why a call failed.
func lastLogError(data []byte) string {
	last := ""
	for _, line := range bytes.Split(data, []byte("\n")) {
		if msg, level, ok := parseLogLine(string(bytes.TrimSpace(line))); ok && isErrorLevel(level) {
			last = msg
		}
	}
	return last
}

// isErrorLevel is true for the logrus levels that report a failure.
func isErrorLevel(level string) bool {
	return level == "error" || level == "fatal" || level == "panic"
}

// parseLogLine reads a logrus-style line, JSON ({"level":..,"msg":..}) or
// text (time=".." level=error msg="..").
func parseLogLine(line string) (msg, level string, ok bool) {
	if strings.HasPrefix(line, "{") {
		var l struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Level != "" {
			return l.Msg, l.Level, true
		}
		return "", "", false
	}
	if !strings.HasPrefix(line, "time=") || !strings.Contains(line, " level=") {
		return "", "", false
	}
	level = textField(line, "level")
	return textField(line, "msg"), level, level != ""
}

// textField reads key=value or key="quoted value" from a logrus text line.
func textField(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	rest := line[i+len(key)+2:]
	if strings.HasPrefix(rest, `"`) {
		if prefix, err := strconv.QuotedPrefix(rest); err == nil {
			v, _ := strconv.Unquote(prefix)
			return v
		}
		return strings.Trim(rest, `"`)
	}
	v, _, _ := strings.Cut(rest, " ")
	return v
}
