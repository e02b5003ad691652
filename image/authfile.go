package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
)

// dockerConfig is the part of a Docker config.json that holds credentials.
type dockerConfig struct {
	Auths map[string]struct {
		Auth          string `json:"auth"`
		Username      string `json:"username"`
		Password      string `json:"password"`
		IdentityToken string `json:"identitytoken"`
		RegistryToken string `json:"registrytoken"`
	} `json:"auths"`
}

// nodeAuth is the pull's credentials: the kubelet's when it sent some, else
// the node's auth file's for host (cri-o's global_auth_file), else none.
// The file is read at every pull, so an edit needs no restart; a missing
// file is no credentials.
func nodeAuth(file, host string, auth *Auth) (*Auth, error) {
	if (auth != nil && *auth != Auth{}) || file == "" {
		return auth, nil
	}
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("auth file: %w", err)
	}
	var cfg dockerConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("auth file %s: %w", file, err)
	}
	key, found := "", false
	for _, k := range authKeys(host) {
		if _, found = cfg.Auths[k]; found {
			key = k
			break
		}
	}
	if !found {
		// Another spelling of the host ("Registry.Example:0443"): the
		// credentials are for the registry, however the file names it.
		keys := slices.Sorted(maps.Keys(cfg.Auths))
		i := slices.IndexFunc(keys, func(k string) bool { return authKeyHost(k) == hostKey(host) })
		if i < 0 {
			return nil, nil
		}
		key = keys[i]
	}
	a := cfg.Auths[key]
	return &Auth{Username: a.Username, Password: a.Password, Auth: a.Auth,
		IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken}, nil
}

// authKeyHost is the registry a config.json key names ("host",
// "https://host/v1/"), as hostKey spells it; "" for none.
func authKeyHost(key string) string {
	for _, scheme := range []string{"https://", "http://"} {
		key = strings.TrimPrefix(key, scheme)
	}
	host, _, _ := strings.Cut(key, "/")
	if host == "" {
		return ""
	}
	return hostKey(host)
}

// authKeys are the names a config.json may know a registry by: the host,
// with a scheme, and Docker Hub's legacy index URL.
func authKeys(host string) []string {
	keys := []string{host, "https://" + host, "http://" + host}
	if host == dockerHub || host == "index.docker.io" {
		keys = append(keys, "https://index.docker.io/v1/", "index.docker.io", dockerHub)
	}
	return keys
}
