package server

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/minicri/minicri/metrics"
)

// UnaryInterceptor logs each call (debug, with its duration; errors at error
// level with the IDs they concern) and turns a panic in a handler into
// codes.Internal so that one bad request cannot take the node's runtime down.
func UnaryInterceptor(log *logrus.Entry) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer finishCall(log, info.FullMethod, req, time.Now(), &err)
		return handler(ctx, req)
	}
}

// StreamInterceptor does for streaming RPCs what UnaryInterceptor does.
func StreamInterceptor(log *logrus.Entry) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer finishCall(log, info.FullMethod, nil, time.Now(), &err)
		return handler(srv, ss)
	}
}

// finishCall is deferred by both interceptors: it turns a panic into the
// call's error (recover works here because finishCall itself is the deferred
// call) and logs the call.
func finishCall(log *logrus.Entry, method string, req any, start time.Time, err *error) {
	if p := recover(); p != nil {
		*err = panicError(log, method, p)
	}
	logCall(log, method, req, time.Since(start), *err)
}

func panicError(log *logrus.Entry, method string, p any) error {
	log.WithField("method", method).Errorf("panic in handler: %v\n%s", p, debug.Stack())
	return toStatus(fmt.Errorf("%s: internal error: %v", method, p)) // %v: a panicked error is Internal whatever it wraps
}

// requestIDs are the IDs a request names, for log fields.
func requestIDs(req any) logrus.Fields {
	fields := logrus.Fields{}
	if r, ok := req.(interface{ GetContainerId() string }); ok && r.GetContainerId() != "" {
		fields["container"] = r.GetContainerId()
	}
	if r, ok := req.(interface{ GetPodSandboxId() string }); ok && r.GetPodSandboxId() != "" {
		fields["pod"] = r.GetPodSandboxId()
	}
	return fields
}

func logCall(log *logrus.Entry, method string, req any, took time.Duration, err error) {
	level := callLogLevel(err)
	if !log.Logger.IsLevelEnabled(level) {
		// Most calls succeed and are logged at debug: at the default level
		// their entry would be built (three maps) only to be dropped, on
		// every one of the kubelet's list and status calls.
		return
	}
	entry := log.WithFields(requestIDs(req)).WithField("method", method).WithField("took", took.Round(time.Microsecond).String())
	switch {
	case err == nil:
		entry.Debug("call")
	case level == logrus.InfoLevel:
		entry.WithField("code", status.Code(err).String()).WithError(err).Info("call failed")
	default:
		entry.WithField("code", status.Code(err).String()).WithError(err).Error(fmt.Sprintf("call failed: %v", err))
	}
}

// callLogLevel is the level a call's line is logged at: debug for a
// success; info for the caller's mistake or a retry of the kubelet's (worth
// a line, not an alarm); error for the rest.
func callLogLevel(err error) logrus.Level {
	if err == nil {
		return logrus.DebugLevel
	}
	switch status.Code(err) {
	case codes.NotFound, codes.Unimplemented, codes.InvalidArgument, codes.AlreadyExists, codes.FailedPrecondition, codes.Canceled:
		return logrus.InfoLevel
	}
	return logrus.ErrorLevel
}

// MetricsUnaryInterceptor times every CRI call and counts its errors by
// gRPC code. Chain it before UnaryInterceptor, so that it sees the
// Internal a recovered panic becomes. A nil m records nothing.
func MetricsUnaryInterceptor(m *metrics.Metrics) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		m.ObserveCall(methodName(info.FullMethod), status.Code(err).String(), time.Since(start))
		return resp, err
	}
}

// MetricsStreamInterceptor does for streaming calls what
// MetricsUnaryInterceptor does.
func MetricsStreamInterceptor(m *metrics.Metrics) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		err := handler(srv, ss)
		m.ObserveCall(methodName(info.FullMethod), status.Code(err).String(), time.Since(start))
		return err
	}
}

// methodName is the RPC's own name ("ExecSync") of a full gRPC method
// ("/runtime.v1.RuntimeService/ExecSync"): the two CRI services share no
// method name.
func methodName(full string) string {
	return full[strings.LastIndexByte(full, '/')+1:]
}
