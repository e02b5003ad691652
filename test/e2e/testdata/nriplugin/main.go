// Command nriplugin is the NRI plugin of the e2e tests, built on the NRI
// library's stub as any external plugin is: it connects to a daemon's NRI
// socket, writes each event it gets as a line to a file, adds an environment
// variable and an RLIMIT_NOFILE to every container (unless -adjust=false:
// then it is a logger, as the bench runs it), and refuses the first
// create of a container with a given name. With -hold-run-pod or -hold-sync
// it holds a pod's RunPodSandbox or its own Synchronize open until a file
// exists. Launched by the runtime from its plugin dir, it takes the events
// file from its configuration instead.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

type plugin struct {
	mu         sync.Mutex
	events     *os.File
	env        string
	adjust     bool
	failOnce   string
	failedOnce bool
	holdRunPod string // RunPodSandbox waits until this file exists
	holdSync   string // Synchronize waits until this file exists
}

// hold logs what it holds, then waits until the file release exists or ctx
// ends (the runtime gave up on the request).
func (p *plugin) hold(ctx context.Context, release, what string) {
	p.log("holding %s", what)
	for {
		if _, err := os.Stat(release); err == nil {
			p.log("released %s", what)
			return
		}
		select {
		case <-ctx.Done():
			p.log("gave up holding %s: %v", what, ctx.Err())
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (p *plugin) log(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.events != nil {
		fmt.Fprintf(p.events, format+"\n", args...)
	}
}

// Configure opens the events file a launched plugin's configuration names.
func (p *plugin) Configure(_ context.Context, config, _, _ string) (api.EventMask, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.events != nil || strings.TrimSpace(config) == "" {
		return 0, nil
	}
	f, err := os.OpenFile(strings.TrimSpace(config), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	p.events = f
	return 0, err
}

func (p *plugin) Synchronize(ctx context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	p.log("Synchronize pods=%d containers=%d", len(pods), len(ctrs))
	for _, pod := range pods {
		p.log("synced-pod %s memory=%d", pod.GetName(), pod.GetLinux().GetPodResources().GetMemory().GetLimit().GetValue())
	}
	for _, c := range ctrs {
		p.log("synced-container %s %s pid=%t", c.GetName(), c.GetState(), c.GetPid() > 0)
	}
	if p.holdSync != "" {
		p.hold(ctx, p.holdSync, "Synchronize")
	}
	return nil, nil
}

func (p *plugin) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	p.log("RunPodSandbox %s", pod.GetName())
	if p.holdRunPod != "" {
		p.hold(ctx, p.holdRunPod, "RunPodSandbox "+pod.GetName()+" "+pod.GetId())
	}
	return nil
}

func (p *plugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.log("StopPodSandbox %s", pod.GetName())
	return nil
}

func (p *plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.log("RemovePodSandbox %s", pod.GetName())
	return nil
}

// UpdatePodSandbox logs the new memory limit and the one the pod had.
func (p *plugin) UpdatePodSandbox(_ context.Context, pod *api.PodSandbox, _, res *api.LinuxResources) error {
	p.log("UpdatePodSandbox %s memory=%d was=%d", pod.GetName(), res.GetMemory().GetLimit().GetValue(),
		pod.GetLinux().GetPodResources().GetMemory().GetLimit().GetValue())
	return nil
}

func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	p.mu.Lock()
	refuse := c.GetName() == p.failOnce && !p.failedOnce
	if refuse {
		p.failedOnce = true
	}
	p.mu.Unlock()
	if refuse {
		p.log("CreateContainer %s refused", c.GetName())
		return nil, nil, fmt.Errorf("nriplugin refuses the first %s", c.GetName())
	}
	p.log("CreateContainer %s", c.GetName())
	if !p.adjust {
		return nil, nil, nil
	}
	adjust := &api.ContainerAdjustment{}
	adjust.AddEnv("NRI_E2E", p.env)
	adjust.AddRlimit("RLIMIT_NOFILE", 1234, 1234)
	return adjust, nil, nil
}

func (p *plugin) StartContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.log("StartContainer %s", c.GetName())
	return nil
}

func (p *plugin) UpdateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container, res *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	p.log("UpdateContainer %s memory=%d", c.GetName(), res.GetMemory().GetLimit().GetValue())
	return nil, nil
}

func (p *plugin) PostUpdateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.log("PostUpdateContainer %s", c.GetName())
	return nil
}

func (p *plugin) StopContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	p.log("StopContainer %s exit=%d", c.GetName(), c.GetExitCode())
	return nil, nil
}

func (p *plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.log("RemoveContainer %s", c.GetName())
	return nil
}

func main() {
	socket := flag.String("socket", "", "the runtime's NRI socket")
	events := flag.String("events", "", "file the events are appended to")
	env := flag.String("env", "injected", "value of NRI_E2E in every container")
	adjust := flag.Bool("adjust", true, "add NRI_E2E and RLIMIT_NOFILE to every container; false: only log the events")
	failOnce := flag.String("fail-create-once", "", "refuse the first create of a container of this name")
	holdRunPod := flag.String("hold-run-pod", "", "hold every RunPodSandbox until this file exists")
	holdSync := flag.String("hold-sync", "", "hold Synchronize until this file exists")
	flag.Parse()
	p := &plugin{env: *env, adjust: *adjust, failOnce: *failOnce, holdRunPod: *holdRunPod, holdSync: *holdSync}
	if *events != "" {
		f, err := os.OpenFile(*events, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		p.events = f
	}
	// Launched, the runtime names it and hands it its connection.
	var opts []stub.Option
	if *socket != "" {
		opts = append(opts, stub.WithPluginName("e2e"), stub.WithPluginIdx("10"), stub.WithSocketPath(*socket))
	}
	s, err := stub.New(p, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Run returns when the runtime closes the connection (it stopped).
	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
