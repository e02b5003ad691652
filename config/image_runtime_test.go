package config

import (
	"strings"
	"testing"
	"time"
)

// Pinned images are containerd's table of NAME = "REFERENCE"; minicri config
// prints it back as a file that loads to the same images.
func TestPinnedImagesRoundTrip(t *testing.T) {
	path := writeFile(t, "[image.pinned_images]\nbase = \"docker.io/library/busybox:1.36\"\n\"my tools\" = \"127.0.0.1:5000/tools@sha256:"+strings.Repeat("a", 64)+"\"\n")
	cfg, err := load(t, "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"base": "docker.io/library/busybox:1.36", "my tools": "127.0.0.1:5000/tools@sha256:" + strings.Repeat("a", 64)}
	if len(cfg.Image.PinnedImages) != len(want) {
		t.Fatalf("pinned_images = %v, want %v", cfg.Image.PinnedImages, want)
	}
	for k, v := range want {
		if cfg.Image.PinnedImages[k] != v {
			t.Errorf("pinned_images[%q] = %q, want %q", k, cfg.Image.PinnedImages[k], v)
		}
	}
	text := Render(cfg, Node{})
	again, err := load(t, "--config", writeFile(t, text))
	if err != nil {
		t.Fatalf("rendered config does not load: %v\n%s", err, text)
	}
	for k, v := range want {
		if again.Image.PinnedImages[k] != v {
			t.Errorf("after minicri config: pinned_images[%q] = %q, want %q\n%s", k, again.Image.PinnedImages[k], v, text)
		}
	}
	if def := Render(Default(), Node{}); !strings.Contains(def, "[image.pinned_images]\n# NAME = \"REFERENCE\"\n") {
		t.Errorf("the default config shows no example of pinned_images:\n%s", def)
	}
}

// The pull progress window is containerd's 5m by default, 1 KiB/s the rate
// it requires; both take flags, and nonsense is refused naming the key.
func TestPullProgressKeys(t *testing.T) {
	cfg, err := load(t, "--config", "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Image.PullProgressTimeout.Std() != 5*time.Minute || cfg.Image.PullProgressMinRate != 1024 {
		t.Errorf("defaults: pull_progress_timeout %v, pull_progress_min_rate %d; want 5m, 1024", cfg.Image.PullProgressTimeout.Std(), cfg.Image.PullProgressMinRate)
	}
	cfg, err = load(t, "--config", "", "--image-pull-progress-timeout", "30s", "--image-pull-progress-min-rate", "4096")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Image.PullProgressTimeout.Std() != 30*time.Second || cfg.Image.PullProgressMinRate != 4096 {
		t.Errorf("flags: pull_progress_timeout %v, pull_progress_min_rate %d; want 30s, 4096", cfg.Image.PullProgressTimeout.Std(), cfg.Image.PullProgressMinRate)
	}
	for _, c := range []struct{ file, key string }{
		{"[image]\npull_progress_timeout = \"-1s\"\n", `"image.pull_progress_timeout"`},
		{"[image]\npull_progress_min_rate = 0\n", `"image.pull_progress_min_rate"`},
	} {
		if _, err := load(t, "--config", writeFile(t, c.file)); err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%q: error %v, want one naming %s", c.file, err, c.key)
		}
	}
}

// The default handler is left to the daemon (chosen at start); a file
// that names one must name a handler it has, and a file that empties the
// handler list is refused.
func TestDefaultHandlerChosenAtStartUnlessNamed(t *testing.T) {
	cfg, err := load(t, "--config", "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Runtime.DefaultHandler != "" {
		t.Errorf("default_handler = %q, want empty (chosen at start)", cfg.Runtime.DefaultHandler)
	}
	for _, name := range []string{DistroRuncHandler, CurrentRuncHandler, "crun"} {
		if _, ok := cfg.Runtime.Handlers[name]; !ok {
			t.Errorf("no default handler %q", name)
		}
	}
	if _, err := load(t, "--config", writeFile(t, "[runtime]\nhandlers = {}\n")); err == nil || !strings.Contains(err.Error(), `"runtime.handlers"`) {
		t.Errorf("no handlers at all: error %v, want one naming runtime.handlers", err)
	}
	cfg, err = load(t, "--config", "", "--runtime-default-handler", CurrentRuncHandler)
	if err != nil || cfg.Runtime.DefaultHandler != CurrentRuncHandler {
		t.Errorf("--runtime-default-handler %s: %q, %v", CurrentRuncHandler, cfg.Runtime.DefaultHandler, err)
	}
}
