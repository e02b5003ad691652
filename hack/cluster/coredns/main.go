// Command coredns is CoreDNS, the cluster DNS server kubeadm deploys, built
// with the plugins of the Corefile kubeadm writes (and a few an operator
// edits in: log, hosts, rewrite, template) rather than all of them: the rest
// (cloud DNS providers, etcd, ...) would add minutes to the build and serve no
// cluster this repository makes. The order plugins run in is CoreDNS's own
// (core/dnsserver's directive list), whatever the order here.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/rewrite"
	_ "github.com/coredns/coredns/plugin/template"
)

func main() { coremain.Run() }
