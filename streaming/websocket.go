package streaming

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

// The channels of the remote command WebSocket protocols, in order.
const (
	stdinChannel = iota
	stdoutChannel
	stderrChannel
	errorChannel
	resizeChannel
)

// serveWebSocketV5 serves exec or attach to a WebSocket client that speaks
// v5.channel.k8s.io, kubectl's default. v5 adds a CLOSE signal per channel,
// which is how such a client ends its stdin; the protocol servers of
// k8s.io/cri-streaming stop at v4, so this one uses their WebSocket
// connection (wsstream) with v5 and the v4 status format.
func (s *Server) serveWebSocketV5(w http.ResponseWriter, r *http.Request, opts *remotecommand.Options, run func(context.Context, Streams) error, doing string) {
	channels := []wsstream.ChannelType{
		stdinChannel:  channelIf(opts.Stdin, wsstream.ReadChannel),
		stdoutChannel: channelIf(opts.Stdout, wsstream.WriteChannel),
		stderrChannel: channelIf(opts.Stderr, wsstream.WriteChannel),
		errorChannel:  wsstream.WriteChannel,
		resizeChannel: channelIf(opts.TTY, wsstream.ReadChannel),
	}
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		remotecommand.StreamProtocolV5Name: {Binary: true, Channels: channels},
	})
	conn.SetIdleTimeout(s.cfg.IdleTimeout)
	_, streams, err := conn.Open(w, r)
	if err != nil {
		s.log.WithError(err).Debug("websocket stream upgrade failed")
		return
	}
	defer conn.Close()
	// An empty message on the first writable channel tells the client that
	// the streams are open, as the library's servers do.
	switch {
	case opts.Stdout:
		streams[stdoutChannel].Write(nil)
	case opts.Stderr:
		streams[stderrChannel].Write(nil)
	default:
		streams[errorChannel].Write(nil)
	}
	ctx := r.Context()
	st := Streams{TTY: opts.TTY}
	if opts.Stdin {
		st.Stdin = streams[stdinChannel]
	}
	if opts.Stdout {
		st.Stdout = streams[stdoutChannel]
	}
	if opts.Stderr {
		st.Stderr = streams[stderrChannel]
	}
	if opts.TTY {
		resize := make(chan TerminalSize)
		go decodeResizes(ctx, streams[resizeChannel], resize)
		st.Resize = resize
	}
	status := statusOf(run(ctx, st), doing)
	if data, err := json.Marshal(status); err == nil {
		streams[errorChannel].Write(data)
	}
}

func channelIf(wanted bool, t wsstream.ChannelType) wsstream.ChannelType {
	if wanted {
		return t
	}
	return wsstream.IgnoreChannel
}

// decodeResizes turns the resize channel's JSON sizes into values until the
// client or the request ends.
func decodeResizes(ctx context.Context, r io.Reader, out chan<- TerminalSize) {
	defer close(out)
	dec := json.NewDecoder(r)
	for {
		var size TerminalSize
		if err := dec.Decode(&size); err != nil {
			return
		}
		select {
		case out <- size:
		case <-ctx.Done():
			return
		}
	}
}

// streamStatus is the status object a v4/v5 client reads from the error
// channel (a Kubernetes metav1.Status).
type streamStatus struct {
	Status  string         `json:"status,omitempty"`
	Message string         `json:"message,omitempty"`
	Reason  string         `json:"reason,omitempty"`
	Details *statusDetails `json:"details,omitempty"`
	Code    int32          `json:"code,omitempty"`
}

type statusDetails struct {
	Causes []statusCause `json:"causes,omitempty"`
}

type statusCause struct {
	Type    string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

func statusOf(err error, doing string) streamStatus {
	var exit *ExitError
	switch {
	case err == nil:
		return streamStatus{Status: "Success"}
	case errors.As(err, &exit):
		return streamStatus{
			Status:  "Failure",
			Reason:  remotecommand.NonZeroExitCodeReason,
			Message: fmt.Sprintf("command terminated with non-zero exit code: %v", exit),
			Details: &statusDetails{Causes: []statusCause{{Type: remotecommand.ExitCodeCauseType, Message: fmt.Sprint(exit.Code)}}},
		}
	default:
		return streamStatus{
			Status:  "Failure",
			Reason:  "InternalError",
			Message: fmt.Sprintf("Internal error occurred: error %s: %v", doing, err),
			Code:    http.StatusInternalServerError,
		}
	}
}
