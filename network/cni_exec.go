package network

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// pluginExec runs CNI plugins as libcni's own exec does, and hands each
// one a descriptor of the plugin lock (plugin_lock.go) as its fd 3: the
// plugins it runs in turn (an IPAM plugin) inherit it too, so the lock is
// held while any plugin the daemon started still runs, also after the
// daemon died.
type pluginExec struct {
	version.PluginDecoder
	stderr io.Writer
	lock   atomic.Pointer[os.File] // nil: plugins get no descriptor
}

var _ invoke.Exec = (*pluginExec)(nil)

// textBusyRetries is how often a plugin whose binary is being written
// (ETXTBSY) is tried again, a second apart, as libcni does.
const textBusyRetries = 5

func (e *pluginExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	for attempt := 0; ; attempt++ {
		stdout.Reset()
		stderr.Reset()
		c := exec.CommandContext(ctx, pluginPath)
		c.Env = withTraceContext(ctx, environ)
		c.Stdin = bytes.NewReader(stdinData)
		c.Stdout, c.Stderr = &stdout, &stderr
		if f := e.lock.Load(); f != nil {
			c.ExtraFiles = []*os.File{f}
		}
		err := c.Run()
		if err == nil {
			break
		}
		if errors.Is(err, syscall.ETXTBSY) && attempt < textBusyRetries {
			time.Sleep(time.Second)
			continue
		}
		return nil, pluginErr(err, stdout.Bytes(), stderr.Bytes())
	}
	if e.stderr != nil && stderr.Len() > 0 {
		_, _ = stderr.WriteTo(e.stderr)
	}
	return stdout.Bytes(), nil
}

func (e *pluginExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

// pluginErr is the CNI error a failed plugin printed, or one made of its
// stderr and exit.
func pluginErr(err error, stdout, stderr []byte) error {
	msg := types.Error{}
	switch {
	case len(stdout) == 0 && len(stderr) == 0:
		msg.Msg = fmt.Sprintf("netplugin failed with no error message: %v", err)
	case len(stdout) == 0:
		msg.Msg = fmt.Sprintf("netplugin failed: %q: %v", string(stderr), err)
	default:
		if perr := json.Unmarshal(stdout, &msg); perr != nil {
			msg.Msg = fmt.Sprintf("netplugin failed but error parsing its diagnostic message %q: %v", string(stdout), perr)
		}
	}
	return &msg
}

// withTraceContext adds the call's trace context to a plugin's environment
// (TRACEPARENT, TRACESTATE, BAGGAGE), as libcni does.
func withTraceContext(ctx context.Context, environ []string) []string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return environ
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithRemoteSpanContext(ctx, sc), carrier)
	if v := carrier.Get("traceparent"); v != "" {
		environ = append(environ, "TRACEPARENT="+v)
	}
	if v := carrier.Get("tracestate"); v != "" {
		environ = append(environ, "TRACESTATE="+v)
	}
	if v := baggage.FromContext(ctx).String(); v != "" {
		environ = append(environ, "BAGGAGE="+v)
	}
	return environ
}
