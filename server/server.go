// Package server is where the CRI meets minicri: it implements the runtime.v1
// RuntimeService and ImageService over the packages below it, and it is the
// only package that knows gRPC and the CRI types. Each RPC (or small family of
// RPCs) has its own file named after it.
package server

import (
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
)

// RuntimeName is what Version reports as the runtime's name.
const RuntimeName = "minicri"

// Options are what the daemon hands the server at start.
type Options struct {
	Config  config.Config
	Version string
	Log     *logrus.Entry
}

// Server implements the CRI. RPCs not built yet fall through to the embedded
// Unimplemented servers, which answer codes.Unimplemented naming the RPC.
type Server struct {
	runtime.UnimplementedRuntimeServiceServer
	runtime.UnimplementedImageServiceServer

	cfg     config.Config
	version string
	log     *logrus.Entry
}

// New builds the server. It does not start anything that outlives it.
func New(opts Options) (*Server, error) {
	return &Server{
		cfg:     opts.Config,
		version: opts.Version,
		log:     opts.Log,
	}, nil
}

// Register attaches both CRI services to a gRPC server.
func (s *Server) Register(g *grpc.Server) {
	runtime.RegisterRuntimeServiceServer(g, s)
	runtime.RegisterImageServiceServer(g, s)
}

// Close releases what New acquired.
func (s *Server) Close() error {
	return nil
}
