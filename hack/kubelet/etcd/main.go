// Command etcd is etcd's own server, built from the version k8s.io/kubernetes
// depends on, for the end-to-end tests that run a real API server.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
