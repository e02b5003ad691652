package server

import (
	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/image"
)

// Reload puts in force what of cfg may change while the daemon runs (on
// SIGHUP): [image.registries], registry_config_path, auth_file, the
// signature policy (signature_policy, signature_policy_dir), the pull
// timeouts and pinned images. Pulls already running keep what they
// started with; nothing running is touched. A cfg that cannot be put in
// force changes nothing. The caller sets the log level.
func (s *Server) Reload(cfg config.Config) error {
	pinned, err := pinnedImages(cfg.Image)
	if err != nil {
		return err
	}
	if r, ok := s.images.(interface{ Reconfigure(image.Reloadable) }); ok {
		r.Reconfigure(imageReloadable(cfg))
	}
	s.pinned.Store(&pinned)
	inForce := s.cfg
	inForce.LogLevel = cfg.LogLevel
	inForce.Image.Registries = cfg.Image.Registries
	inForce.Image.RegistryConfigPath = cfg.Image.RegistryConfigPath
	inForce.Image.AuthFile = cfg.Image.AuthFile
	inForce.Image.SignaturePolicy = cfg.Image.SignaturePolicy
	inForce.Image.SignaturePolicyDir = cfg.Image.SignaturePolicyDir
	inForce.Image.PullTimeout = cfg.Image.PullTimeout
	inForce.Image.PullProgressTimeout = cfg.Image.PullProgressTimeout
	inForce.Image.PullProgressMinRate = cfg.Image.PullProgressMinRate
	inForce.Image.PinnedImages = cfg.Image.PinnedImages
	s.reloaded.Store(&inForce)
	return nil
}

// configInForce is the configuration the daemon runs with: the one it
// started with, and the keys the last reload changed.
func (s *Server) configInForce() config.Config {
	if c := s.reloaded.Load(); c != nil {
		return *c
	}
	return s.cfg
}

// pinnedImages is the image.pinned_images in force.
func (s *Server) pinnedImages() image.Pinned {
	if p := s.pinned.Load(); p != nil {
		return *p
	}
	return nil
}

// imageReloadable is what of the [image] table the image store takes at
// start and on every reload.
func imageReloadable(cfg config.Config) image.Reloadable {
	registries := make(map[string]image.RegistryConfig, len(cfg.Image.Registries))
	for host, r := range cfg.Image.Registries {
		registries[host] = image.RegistryConfig{Mirrors: r.Mirrors, Insecure: r.Insecure}
	}
	return image.Reloadable{
		Registries:         registries,
		RegistryConfigPath: cfg.Image.RegistryConfigPath,
		AuthFile:           cfg.Image.AuthFile,
		SignaturePolicy:    cfg.Image.SignaturePolicy,
		SignaturePolicyDir: cfg.Image.SignaturePolicyDir,
		PullTimeout:        cfg.Image.PullTimeout.Std(),
		PullProgress:       image.ProgressLimit{Window: cfg.Image.PullProgressTimeout.Std(), MinRate: cfg.Image.PullProgressMinRate},
	}
}
