//go:build crashpoints

package kernelfeat

import (
	"os"
	"strings"
)

// ForceEnv names the environment variable with which the e2e suite's
// daemon (built with -tags crashpoints, never installed) takes an older
// kernel's answers on this host: "overlayLowerdirPlus=no,idmappedTmpfs=no"
// runs the daemon as Debian 12's 6.1 would. The shipped build has no such
// variable.
const ForceEnv = "MINICRI_TEST_KERNELFEAT"

func init() {
	for _, kv := range strings.Split(os.Getenv(ForceEnv), ",") {
		name, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			continue
		}
		for _, f := range registry {
			if f.Name == name {
				f.Force(v == "yes", "forced by "+ForceEnv)
			}
		}
	}
}
