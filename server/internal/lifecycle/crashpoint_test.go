package lifecycle

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

const crashEnvName = "MINICRI_TEST_CRASH_AT"

// TestCrashPointsOnlyWithTheTag runs this test binary again with the crash
// environment variable naming a point, and calls that point: built without
// -tags crashpoints (as the shipped daemon is) it must survive; built with
// it, it must die.
func TestCrashPointsOnlyWithTheTag(t *testing.T) {
	if os.Getenv(crashEnvName) != "" {
		CrashPoint("sandbox-after-record")
		os.Stdout.WriteString("survived the crash point\n")
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashPointsOnlyWithTheTag$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnvName+"=sandbox-after-record")
	out, err := cmd.CombinedOutput()
	survived := err == nil && strings.Contains(string(out), "survived the crash point")
	if survived != !CrashPointsBuiltIn {
		t.Fatalf("crash points built in: %v; the process survived a named point: %v (err %v)\n%s", CrashPointsBuiltIn, survived, err, out)
	}
}
