//go:build tools

// Package critools pins what building critest and crictl needs, so that go
// mod tidy keeps it. critest is a test binary (go test -c of
// sigs.k8s.io/cri-tools/cmd/critest, a package of test files only), so its
// own imports are listed here instead of the package itself.
package critools

import (
	_ "github.com/onsi/ginkgo/v2"
	_ "github.com/onsi/gomega"
	_ "sigs.k8s.io/cri-tools/cmd/crictl"
	_ "sigs.k8s.io/cri-tools/pkg/benchmark"
	_ "sigs.k8s.io/cri-tools/pkg/common"
	_ "sigs.k8s.io/cri-tools/pkg/framework"
	_ "sigs.k8s.io/cri-tools/pkg/validate"
	_ "sigs.k8s.io/cri-tools/pkg/version"
)
