package podsandbox

import (
	"sync"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/validate"
)

// Two pods whose user namespaces share host IDs are one user to the node:
// either pod's processes own the other's files and may signal or ptrace
// its processes. The kubelet's allocator never hands out such ranges; any
// other CRI client may ask, so RunPodSandbox claims the host IDs
// (ClaimHostIDs) before the pod is made, and refuses a pod whose host
// ranges overlap those of a pod that is being made or ready. A stopped
// (not ready) pod runs nothing, and the kubelet makes the next sandbox of
// the same pod with the same ranges before it removes the old one.

// hostIDClaims are the user namespaces of the pods being made, from their
// claim until RunPodSandbox returns: by then each is a listed record, or
// gone. The check and the claim are one step under mu, so that two
// concurrent RunPodSandbox cannot both pass.
type hostIDClaims struct {
	mu   sync.Mutex
	pods map[string]*runtime.UserNamespace
}

// ClaimHostIDs refuses cfg's user namespace when its host IDs overlap
// another pod's, else holds them for pod id until release is called. The
// error wraps validate.ErrInvalid and names the field.
func (c *Controller) ClaimHostIDs(id string, cfg *runtime.PodSandboxConfig) (release func(), err error) {
	u := validate.PodUserNamespace(cfg)
	if u == nil {
		return func() {}, nil
	}
	claims := &c.claims
	claims.mu.Lock()
	defer claims.mu.Unlock()
	if err := c.checkHostIDsFree(u); err != nil {
		return nil, err
	}
	if claims.pods == nil {
		claims.pods = map[string]*runtime.UserNamespace{}
	}
	claims.pods[id] = u
	return func() {
		claims.mu.Lock()
		defer claims.mu.Unlock()
		delete(claims.pods, id)
	}, nil
}

// checkHostIDsFree compares u with the claims and the ready or creating
// sandboxes. The caller holds the claims' lock.
func (c *Controller) checkHostIDsFree(u *runtime.UserNamespace) error {
	for other, ou := range c.claims.pods {
		if err := disjointHostIDs(u, ou, other, "being created"); err != nil {
			return err
		}
	}
	for _, sb := range c.deps.Records.List() {
		if _, claimed := c.claims.pods[sb.ID]; claimed || sb.State == lifecycle.StateNotReady {
			continue
		}
		cfg, err := sb.DecodeConfig()
		if err != nil {
			return err
		}
		ou := validate.PodUserNamespace(cfg)
		if ou == nil {
			continue
		}
		if err := disjointHostIDs(u, ou, sb.ID, sb.State.String()); err != nil {
			return err
		}
	}
	return nil
}

// disjointHostIDs names the field of u whose host range overlaps one of
// other's, for the pod sandbox id (in state).
func disjointHostIDs(u, other *runtime.UserNamespace, id, state string) error {
	const field = "config.linux.security_context.namespace_options.userns_options"
	for _, set := range []struct {
		name        string
		maps, other []*runtime.IDMapping
	}{{"uids", u.GetUids(), other.GetUids()}, {"gids", u.GetGids(), other.GetGids()}} {
		for _, m := range set.maps {
			for _, o := range set.other {
				if validate.Overlaps(m.GetHostId(), o.GetHostId(), m.GetLength(), o.GetLength()) {
					return validate.Invalidf(field+"."+set.name, "host IDs %d-%d overlap host IDs %d-%d of pod sandbox %s (%s): two pods must not share host IDs, or each would own the other's files and processes",
						m.GetHostId(), uint64(m.GetHostId())+uint64(m.GetLength())-1, o.GetHostId(), uint64(o.GetHostId())+uint64(o.GetLength())-1, id, state)
				}
			}
		}
	}
	return nil
}
