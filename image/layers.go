package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/atomicfile"
	"github.com/minicri/minicri/internal/tracing"
)

// chainIDs names each layer together with everything below it, as the OCI
// image spec defines: ChainID(L0) = DiffID(L0),
// ChainID(Ln) = sha256(ChainID(Ln-1) + " " + DiffID(Ln)). Two images that
// share their first layers share those unpacked layers.
func chainIDs(diffIDs []v1.Hash) []v1.Hash {
	out := make([]v1.Hash, len(diffIDs))
	for i, d := range diffIDs {
		if i == 0 {
			out[i] = d
			continue
		}
		sum := sha256.Sum256([]byte(out[i-1].String() + " " + d.String()))
		out[i] = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	}
	return out
}

func (s *Store) hasLayer(chain v1.Hash) bool {
	_, err := os.Stat(s.layerDir(chain.String()))
	return err == nil
}

// ensureLayer unpacks the layer blob into the layer dir of chain unless it is
// there already. It unpacks into the temp dir and renames the result into
// place, so a layer dir is always complete; when two processes race, the
// first rename wins and the other drops its copy. What it unpacks is charged
// to budget, the pull's; a pull that waits for another's unpack of the same
// layer is not charged for it.
func (s *Store) ensureLayer(ctx context.Context, chain, diffID, blob v1.Hash, budget *unpackBudget) error {
	if err := checkDigest(chain); err != nil {
		return err
	}
	if s.hasLayer(chain) {
		return nil
	}
	return s.once(ctx, &s.layerFlight, chain.Hex, func() error {
		if s.hasLayer(chain) {
			return nil
		}
		release, err := s.unpackSlots.wait(ctx, budget)
		if err != nil {
			return err
		}
		defer release()
		return s.unpackLayer(ctx, chain, diffID, blob, budget, release)
	})
}

// unpackLayer unpacks blob into the layer dir of chain; written is called
// when the files are written, before they are synced.
func (s *Store) unpackLayer(ctx context.Context, chain, diffID, blob v1.Hash, budget *unpackBudget, written func()) (err error) {
	ctx, span := tracing.Start(ctx, "image.unpack", tracing.LayerDigest.String(blob.String()))
	defer func() { tracing.End(span, err) }()
	return s.makeLayerDir(chain, written, func(tmp string) error {
		got, err := unpackLayerFile(ctx, s.blobPath(blob), tmp, budget)
		if err != nil {
			return fmt.Errorf("unpack layer %s: %w", blob, err)
		}
		if got != diffID {
			return fmt.Errorf("layer %s uncompresses to %s, the image config says %s: %w", blob, got, diffID, ErrDigestMismatch)
		}
		return nil
	})
}

// makeLayerDir has fill fill a temp dir, then renames it to the layer dir
// of chain, so a layer dir is always complete; when two processes race,
// the first rename wins and the other drops its copy. Nothing of a failed
// fill stays. written (nil: nothing) is called when fill has returned,
// before the wait for the disk.
func (s *Store) makeLayerDir(chain v1.Hash, written func(), fill func(tmp string) error) (retErr error) {
	tmp, err := os.MkdirTemp(s.path(tmpDir), "layer-")
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	err = fill(tmp)
	if written != nil {
		written()
	}
	if err != nil {
		return err
	}
	// The layer's files must be on disk before its name says it is complete.
	if err := s.opts.Hooks.syncLayer(tmp); err != nil {
		return err
	}
	err = os.Rename(tmp, s.layerDir(chain.String()))
	if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
		os.RemoveAll(tmp) // another process made it first
		return nil
	}
	if err != nil {
		return err
	}
	return atomicfile.SyncDir(s.path(layersDir))
}

func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}
