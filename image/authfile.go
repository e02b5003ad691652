package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
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
	for _, key := range authKeys(host) {
		if a, ok := cfg.Auths[key]; ok {
			return &Auth{Username: a.Username, Password: a.Password, Auth: a.Auth,
				IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken}, nil
		}
	}
	return nil, nil
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
