//go:build e2e

package e2e

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// critestEnv names critest, the CRI validation suite of cri-tools, built by
// hack/build-cri-tools.sh; make e2e sets it.
const critestEnv = "MINICRI_CRITEST"

// critestAllowedSkips are the only specs critest may skip, each with why;
// any other skip (a "spec discrepancy" above all) fails the test.
var critestAllowedSkips = []critestSkip{
	{regexp.MustCompile(`(?i)benchmark`), "benchmark-only specs: critest -benchmark runs them"},
	{regexp.MustCompile(`AppArmor`), "AppArmor is disabled on this host"},
	{regexp.MustCompile(`public image with digest should be pulled and removed`),
		"its image is pinned by a digest of cri-tools' own build, which cannot be rebuilt offline"},
}

type critestSkip struct {
	spec *regexp.Regexp
	why  string
}

// critestSkipFlag keeps critest from running the digest spec: its pull
// would fail, not skip.
const critestSkipFlag = "public image with digest should be pulled and removed"

// critest, with -nri-socket (critest is then an NRI plugin too), against a
// daemon on its built-in defaults (its own state root, socket and NRI
// socket; a bridge network; the registries critest pulls from mirrored to
// a local registry holding images built from Debian's busybox): no spec
// fails, and none is skipped but those of critestAllowedSkips.
func TestCritest(t *testing.T) {
	bin := os.Getenv(critestEnv)
	if bin == "" {
		t.Skipf("%s is not set: build critest with `make cri-tools` (hack/build-cri-tools.sh prints its path) "+
			"and run %s=PATH go test -tags e2e -run TestCritest ./test/e2e/; make e2e sets it", critestEnv, critestEnv)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s=%s: %v", critestEnv, bin, err)
	}
	reg := registry.Start(t, registry.Options{})
	pushCritestImages(t, reg.Host(), filepath.Join(filepath.Dir(bin), "busybox-sh"))
	var mirrors strings.Builder
	for _, host := range []string{"registry.k8s.io", "k8s.gcr.io", "gcr.io"} {
		fmt.Fprintf(&mirrors, "[image.registries.%q]\nmirrors = [\"http://%s\"]\n", host, reg.Host())
	}
	d := StartDaemon(t, WithConfig(mirrors.String()))
	searchable(t, d.Dir) // for the pods in user namespaces
	d.bridgeNetwork(t)

	report := filepath.Join(t.TempDir(), "critest.json")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin,
		"-runtime-endpoint", d.Endpoint, "-image-endpoint", d.Endpoint,
		"-nri-socket", d.NRISocket,
		"-ginkgo.skip", critestSkipFlag,
		"-ginkgo.json-report", report,
		"-ginkgo.no-color")
	// critest looks for its config (crictl.yaml) in its own dir too.
	cmd.Dir = t.TempDir()
	logPath := filepath.Join(t.TempDir(), "critest.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	start := time.Now()
	runErr := cmd.Run()
	took := time.Since(start)

	specs, err := readCritestReport(report)
	if err != nil {
		t.Fatalf("critest (%v, after %v) left no report: %v\n%s", runErr, took.Round(time.Second), err, tailFile(logPath, 80))
	}
	var passed, failed, skipped []critestSpec
	var unexpected []string
	for _, s := range specs {
		switch s.State {
		case "passed":
			passed = append(passed, s)
		case "skipped":
			skipped = append(skipped, s)
			i := slices.IndexFunc(critestAllowedSkips, func(a critestSkip) bool { return a.spec.MatchString(s.name()) })
			if i < 0 {
				unexpected = append(unexpected, fmt.Sprintf("%s: %s", s.name(), s.Failure.Message))
				continue
			}
			t.Logf("critest skipped %s (%s)", s.name(), critestAllowedSkips[i].why)
		default:
			failed = append(failed, s)
		}
	}
	t.Logf("critest: %d passed, %d failed, %d skipped in %v", len(passed), len(failed), len(skipped), took.Round(time.Second))
	for _, s := range failed {
		t.Errorf("critest spec %s: %s\n%s", s.State, s.name(), s.Failure.Message)
	}
	for _, u := range unexpected {
		t.Errorf("critest skipped a spec it may not skip: %s", u)
	}
	if len(passed) == 0 {
		t.Errorf("critest passed no spec")
	}
	if runErr != nil && len(failed) == 0 {
		t.Errorf("critest failed (%v) with no failed spec", runErr)
	}
	if t.Failed() {
		t.Logf("critest's output (%s), last lines:\n%s", logPath, tailFile(logPath, 200))
	}
}

// critestSpec is the part of a ginkgo JSON report's spec that the test reads.
type critestSpec struct {
	ContainerHierarchyTexts []string
	LeafNodeText            string
	LeafNodeType            string
	State                   string
	Failure                 struct{ Message string }
}

func (s critestSpec) name() string {
	return strings.Join(append(slices.Clone(s.ContainerHierarchyTexts), s.LeafNodeText), " ")
}

// readCritestReport reads the specs (It nodes) of a ginkgo JSON report.
func readCritestReport(path string) ([]critestSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var reports []struct{ SpecReports []critestSpec }
	if err := json.Unmarshal(data, &reports); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	var specs []critestSpec
	for _, r := range reports {
		for _, s := range r.SpecReports {
			if s.LeafNodeType == "It" {
				specs = append(specs, s)
			}
		}
	}
	return specs, nil
}

// tailFile is the last n lines of a file.
func tailFile(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// critestPasswd and critestGroup are the accounts of busybox's own image,
// which cri-tools' test images are built on: www-data is uid 33.
const (
	critestPasswd = "root:x:0:0:root:/root:/bin/sh\ndaemon:x:1:1:daemon:/usr/sbin:/bin/false\n" +
		"bin:x:2:2:bin:/bin:/bin/false\nsys:x:3:3:sys:/dev:/bin/false\nsync:x:4:100:sync:/bin:/bin/sync\n" +
		"mail:x:8:8:mail:/var/spool/mail:/bin/false\nwww-data:x:33:33:www-data:/var/www:/bin/false\n" +
		"operator:x:37:37:Operator:/var:/bin/false\nnobody:x:65534:65534:nobody:/home:/bin/false\n"
	critestGroup = "root:x:0:\ndaemon:x:1:\nbin:x:2:\nsys:x:3:\nadm:x:4:\ntty:x:5:\ndisk:x:6:\nwheel:x:10:root\n" +
		"mail:x:12:\nwww-data:x:33:\nusers:x:100:\nnogroup:x:65534:\n"
)

// critestNginx stands in for nginx in cri-tools' nginx images: busybox's
// httpd serving a page on NGINX_PORT, run by a script whose process is
// named nginx (what pidof looks for), which writes its PID to
// /var/run/nginx.pid and whose command line says "master process", as
// nginx's does.
const critestNginx = `#!/bin/sh
mkdir -p /var/run
echo $$ > /var/run/nginx.pid
httpd -f -p "${NGINX_PORT:-80}" -h /usr/share/nginx/html &
child=$!
trap 'kill $child; exit 0' TERM INT QUIT
wait $child
`

// critestHttpd stands in for Apache's httpd image: it says httpd on its
// log, as Apache does, and serves a page on port 80.
const critestHttpd = `#!/bin/sh
echo "httpd: serving /usr/local/apache2/htdocs on port 80"
exec httpd -f -v -p 80 -h /usr/local/apache2/htdocs
`

// Tools critest runs that Debian's busybox has no applet for.
const (
	// ipcs -m: the System V shared memory segments, their IDs among them.
	critestIpcs = "#!/bin/sh\ncat /proc/sysvipc/shm\n"
	// pgrep NAME: the PIDs of the processes of that name.
	critestPgrep = "#!/bin/sh\nexec pidof \"$@\"\n"
)

// critestNoNewPrivs is cri-tools' nonewprivs image's program, installed
// setuid root: it prints its effective uid.
const critestNoNewPrivs = `#include <stdio.h>
#include <unistd.h>
int main(void) { printf("Effective uid: %d\n", (int)geteuid()); return 0; }
`

// critestBusyboxLayer is busybox as its own image has it: every applet a
// hard link of /bin/busybox (so that masking /bin/ls masks ls alone), the
// accounts of critestPasswd and critestGroup, and stand-ins for ipcs and
// pgrep. Its /bin/sh is shell, a busybox that runs commands from PATH (as
// busybox's own image's does; busybox-static's sh runs its applets
// itself, so a masked /bin/ls would still run), with the libraries it
// links, the host's.
func critestBusyboxLayer(t *testing.T, shell string) v1.Layer {
	t.Helper()
	sh, err := os.ReadFile(shell)
	if err != nil {
		t.Fatalf("critest's images need %s, which hack/build-cri-tools.sh puts beside critest: %v", shell, err)
	}
	body, err := os.ReadFile(testimage.BusyboxPath)
	if err != nil {
		t.Skipf("critest's images are built from Debian's busybox-static: %v", err)
	}
	out, err := exec.Command(testimage.BusyboxPath, "--list").Output()
	if err != nil {
		t.Fatalf("list busybox's applets: %v", err)
	}
	entries := []testimage.Entry{
		testimage.Dir("bin", 0o755), testimage.Dir("dev", 0o755), testimage.Dir("etc", 0o755),
		testimage.Dir("home", 0o755), testimage.Dir("proc", 0o755), testimage.Dir("root", 0o700),
		testimage.Dir("sys", 0o755), testimage.Dir("tmp", 0o1777), testimage.Dir("usr", 0o755),
		testimage.Dir("usr/bin", 0o755), testimage.Dir("usr/sbin", 0o755), testimage.Dir("var", 0o755),
		testimage.Dir("var/run", 0o755), testimage.Dir("var/www", 0o755),
		{Header: tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(body))}, Body: body},
		testimage.File("etc/passwd", critestPasswd, 0o644),
		testimage.File("etc/group", critestGroup, 0o644),
		testimage.File("bin/ipcs", critestIpcs, 0o755),
		testimage.File("bin/pgrep", critestPgrep, 0o755),
		testimage.Symlink("usr/bin/env", "/bin/env"),
		{Header: tar.Header{Typeflag: tar.TypeReg, Name: "bin/sh", Mode: 0o755, Size: int64(len(sh))}, Body: sh},
	}
	entries = append(entries, sharedLibraries(t, shell)...)
	for _, applet := range strings.Fields(string(out)) {
		if applet != "busybox" && applet != "ipcs" && applet != "pgrep" && applet != "sh" {
			entries = append(entries, testimage.Hardlink("bin/"+applet, "bin/busybox"))
		}
	}
	return testimage.Layer(t, entries...)
}

// sharedLibraries are the files of the libraries bin links (and its
// loader), at their paths, as ldd lists them, with the directories they
// are in.
func sharedLibraries(t *testing.T, bin string) []testimage.Entry {
	t.Helper()
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", bin, err)
	}
	var entries []testimage.Entry
	dirs := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		var lib string
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			lib = f[2]
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			lib = f[0]
		default:
			continue
		}
		body, err := os.ReadFile(lib)
		if err != nil {
			t.Fatal(err)
		}
		var parents []string
		for d := filepath.Dir(lib); d != "/"; d = filepath.Dir(d) {
			parents = append(parents, d)
		}
		for i := len(parents) - 1; i >= 0; i-- {
			if d := strings.TrimPrefix(parents[i], "/"); !dirs[d] {
				dirs[d] = true
				entries = append(entries, testimage.Dir(d, 0o755))
			}
		}
		entries = append(entries, testimage.Entry{Header: tar.Header{Typeflag: tar.TypeReg,
			Name: strings.TrimPrefix(lib, "/"), Mode: 0o755, Size: int64(len(body))}, Body: body})
	}
	return entries
}

// pushCritestImages builds, from Debian's busybox, the images critest
// pulls, and pushes them to host under the paths critest names them by
// (the daemon mirrors registry.k8s.io, k8s.gcr.io and gcr.io to host).
// shell is critestBusyboxLayer's.
func pushCritestImages(t *testing.T, host, shell string) {
	t.Helper()
	base := critestBusyboxLayer(t, shell)
	busybox := func(extra []testimage.Entry, opts ...testimage.Option) v1.Image {
		layers := []v1.Layer{base}
		if len(extra) > 0 {
			layers = append(layers, testimage.Layer(t, extra...))
		}
		return testimage.Image(t, layers, opts...)
	}
	// cri-tools' image-test: busybox with an empty file named after the image.
	marked := func(name string) v1.Image {
		return busybox([]testimage.Entry{testimage.File(name, "", 0o644)})
	}
	nginx := func(port string) v1.Image {
		return busybox([]testimage.Entry{
			testimage.File("usr/sbin/nginx", critestNginx, 0o755),
			testimage.Dir("usr/share", 0o755), testimage.Dir("usr/share/nginx", 0o755),
			testimage.Dir("usr/share/nginx/html", 0o755),
			testimage.File("usr/share/nginx/html/index.html", "<h1>Welcome to nginx!</h1>\n", 0o644),
		}, testimage.WithEnv("NGINX_PORT="+port), testimage.WithCmd("nginx", "master process"))
	}
	nnp := staticProgram(t, critestNoNewPrivs)
	const staging = "k8s-staging-cri-tools/"
	same := marked("same-image")
	images := map[string]v1.Image{
		"e2e-test-images/busybox:1.29-2": busybox(nil),
		"e2e-test-images/nginx:1.14-2":   nginx("80"),
		"e2e-test-images/httpd:2.4.39-4": busybox([]testimage.Entry{
			testimage.Dir("usr/local", 0o755), testimage.Dir("usr/local/apache2", 0o755),
			testimage.Dir("usr/local/apache2/htdocs", 0o755),
			testimage.File("usr/local/apache2/htdocs/index.html", "<html><body><h1>It works!</h1></body></html>\n", 0o644),
			testimage.File("usr/local/bin/httpd-foreground", critestHttpd, 0o755),
		}, testimage.WithCmd("/usr/local/bin/httpd-foreground")),
		"e2e-test-images/nonewprivs:1.3": busybox([]testimage.Entry{
			testimage.Dir("usr/local", 0o755), testimage.Dir("usr/local/bin", 0o755),
			{Header: tar.Header{Typeflag: tar.TypeReg, Name: "usr/local/bin/nnp", Mode: 0o4755, Size: int64(len(nnp))}, Body: nnp},
		}, testimage.WithCmd("/usr/local/bin/nnp")),
		"pause:3.9": busybox(nil, testimage.WithCmd("sleep", "infinity")),
		staging + "hostnet-nginx-" + goruntime.GOARCH + ":latest": nginx("12003"),
		staging + "test-image-user-uid:latest":                    busybox(nil, testimage.WithUser("1002")),
		staging + "test-image-user-username:latest":               busybox(nil, testimage.WithUser("www-data")),
		staging + "test-image-user-uid-group:latest":              busybox(nil, testimage.WithUser("1003:1004")),
		staging + "test-image-user-username-group:latest":         busybox(nil, testimage.WithUser("www-data:1004")),
		staging + "test-image-predefined-group:latest": busybox([]testimage.Entry{
			testimage.File("etc/passwd", critestPasswd+"default-user:x:1000:1000:Linux User,,,:/home/default-user:/bin/sh\n", 0o644),
			testimage.File("etc/group", critestGroup+"default-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n", 0o644),
			testimage.Dir("home/default-user", 0o755),
		}, testimage.WithUser("1000")),
		staging + "test-image-latest:latest": marked("test-image-latest"),
		staging + "test-image-tag:test":      marked("test"),
		staging + "test-image-tag:all":       marked("all"),
		staging + "test-image-1:latest":      marked("test-image-1"),
		staging + "test-image-2:latest":      marked("test-image-2"),
		staging + "test-image-3:latest":      marked("test-image-3"),
		staging + "test-image-tags:1":        same,
		staging + "test-image-tags:2":        same,
		staging + "test-image-tags:3":        same,
	}
	for path, img := range images {
		testimage.Push(t, img, host+"/"+path)
	}
}
