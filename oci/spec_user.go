package oci

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"github.com/moby/sys/user"
	"golang.org/x/sys/unix"
)

// maxAccountsFile bounds how much of an image's /etc/passwd or /etc/group is
// read: the image is untrusted and a real file is a few KiB.
const maxAccountsFile = 4 << 20

// ResolveUser works out the uid, gid, groups and home of the container's
// process, as the kubelet and containerd do:
//
//   - runAsUser, else runAsUsername, else the image's USER ("name", "uid",
//     "uid:gid", "name:group") chooses the user; none means root;
//   - runAsGroup, else the group part of the image's USER, else the user's
//     primary group in the image's /etc/passwd (0 when it has no entry) is the gid;
//   - additional groups are the gid, the image's /etc/group memberships of the
//     user, and supplementalGroups.
//
// /etc/passwd and /etc/group are opened inside rootfs with symlinks resolved
// inside it, so that an image cannot make the daemon read a host file. A missing
// file is fine for numeric ids; a name then is an ErrInvalid error.
func ResolveUser(rootfs, imageUser string, runAsUser *int64, runAsUsername string, runAsGroup *int64, supplementalGroups []int64) (User, error) {
	return resolveUser(rootfs, imageUser, runAsUser, runAsUsername, runAsGroup, supplementalGroups, true)
}

// ResolveUserStrict is ResolveUser for the supplemental groups policy
// Strict: the image's /etc/group memberships of the user are left out, so
// the additional groups are the gid and supplementalGroups only. An image
// cannot then hand its user a group the pod did not name.
func ResolveUserStrict(rootfs, imageUser string, runAsUser *int64, runAsUsername string, runAsGroup *int64, supplementalGroups []int64) (User, error) {
	return resolveUser(rootfs, imageUser, runAsUser, runAsUsername, runAsGroup, supplementalGroups, false)
}

func resolveUser(rootfs, imageUser string, runAsUser *int64, runAsUsername string, runAsGroup *int64, supplementalGroups []int64, mergeImageGroups bool) (User, error) {
	userPart, groupPart, source, err := chooseUserAndGroup(imageUser, runAsUser, runAsUsername, runAsGroup)
	if err != nil {
		return User{}, err
	}
	accounts, err := readImageAccounts(rootfs)
	if err != nil {
		return User{}, err
	}
	u, err := accounts.lookupUser(userPart)
	if err != nil {
		return User{}, fmt.Errorf("%s: %w", source, err)
	}
	if groupPart != "" {
		if u.GID, err = accounts.lookupGroup(groupPart); err != nil {
			return User{}, fmt.Errorf("%s: %w", source, err)
		}
	}
	gids := []uint32{u.GID}
	if mergeImageGroups {
		gids = append(gids, accounts.memberships(u.Username)...)
	}
	for _, g := range supplementalGroups {
		id, err := toID("supplemental group", g)
		if err != nil {
			return User{}, err
		}
		gids = append(gids, id)
	}
	u.AdditionalGids = uniqueIDs(gids)
	return u, nil
}

// chooseUserAndGroup returns the user and group strings that apply, by the
// precedence described on ResolveUser, and where they came from, for errors.
func chooseUserAndGroup(imageUser string, runAsUser *int64, runAsUsername string, runAsGroup *int64) (user, group, source string, err error) {
	switch {
	case runAsUser != nil:
		uid, err := toID("run_as_user", *runAsUser)
		if err != nil {
			return "", "", "", err
		}
		user, source = strconv.FormatUint(uint64(uid), 10), "run_as_user"
	case runAsUsername != "":
		user, source = runAsUsername, "run_as_username"
	default:
		user, group, _ = strings.Cut(imageUser, ":")
		source = fmt.Sprintf("the image's user %q", imageUser)
	}
	if runAsGroup != nil {
		gid, err := toID("run_as_group", *runAsGroup)
		if err != nil {
			return "", "", "", err
		}
		group = strconv.FormatUint(uint64(gid), 10)
	}
	return user, group, source, nil
}

// MaxID is the largest uid or gid a process can be given: 2^32-1 is the
// kernel's "no id", and setresuid(-1, -1, -1) leaves the ids as they were.
const MaxID = 1<<32 - 2

func toID(what string, v int64) (uint32, error) {
	if v < 0 || v > MaxID {
		return 0, fmt.Errorf("%w: %s %d is out of range (0 to %d)", ErrInvalid, what, v, MaxID)
	}
	return uint32(v), nil
}

// ParseID reads the user or the group part of an image's USER the one way
// that both the container's identity and ImageStatus (which the kubelet's
// runAsNonRoot check reads) take it. All ASCII digits is a number, and it
// must fit 0 to MaxID: "4294967296" is an error, never a name to look up in
// the image's /etc/passwd, where an image could make it uid 0 while
// ImageStatus says 4294967296 (containerd's GHSA-fqw6-gf59-qr4w). Anything
// else is a name (numeric false), but not one that another parser could
// read as a number or that no account can have: a leading sign ("+0",
// "-1") or white space is an error. "" is a name too (no user).
func ParseID(s string) (id uint32, numeric bool, err error) {
	if s == "" {
		return 0, false, nil
	}
	if strings.Trim(s, "0123456789") == "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n > MaxID {
			return 0, true, fmt.Errorf("%w: %s is out of range (0 to %d)", ErrInvalid, s, MaxID)
		}
		return uint32(n), true, nil
	}
	if s[0] == '+' || s[0] == '-' {
		return 0, false, fmt.Errorf("%w: %q is neither a number of 0 to %d nor a name (a name cannot begin with %q)", ErrInvalid, s, MaxID, s[:1])
	}
	if i := strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
		return 0, false, fmt.Errorf("%w: %q is not a name: it holds white space or a control character", ErrInvalid, s)
	}
	return 0, false, nil
}

// imageAccounts are an image's /etc/passwd and /etc/group, as runc's
// parser (moby/sys/user) reads them; a nil slice means the file is missing.
type imageAccounts struct {
	passwd []user.User
	groups []user.Group
}

func readImageAccounts(rootfs string) (imageAccounts, error) {
	var a imageAccounts
	err := withFileInRoot(rootfs, "/etc/passwd", func(r io.Reader) (err error) {
		a.passwd, err = user.ParsePasswdFilter(r, func(u user.User) bool {
			return isAccount(u.Name) && validID(u.Uid) && validID(u.Gid)
		})
		return err
	})
	if err != nil {
		return a, err
	}
	err = withFileInRoot(rootfs, "/etc/group", func(r io.Reader) (err error) {
		a.groups, err = user.ParseGroupFilter(r, func(g user.Group) bool {
			return isAccount(g.Name) && validID(g.Gid)
		})
		return err
	})
	return a, err
}

// isAccount leaves out what glibc does not read as an account: a comment
// (moby/sys/user skips those in /etc/group only) and NIS's +/- lines.
func isAccount(name string) bool {
	return name != "" && name[0] != '#' && name[0] != '+' && name[0] != '-'
}

// validID reports whether an id field of /etc/passwd or /etc/group is one
// a process can have; an entry whose id is not (2^32-1 and beyond, or
// negative) is skipped, never wrapped.
func validID(id int) bool {
	return id >= 0 && id <= MaxID
}

// withFileInRoot calls read on the regular file at path inside root, with
// every symlink resolved inside root, so that an image cannot make the
// daemon read a host file; read sees at most maxAccountsFile bytes. A
// missing file is not an error, and read is not called.
func withFileInRoot(root, path string, read func(io.Reader) error) error {
	handle, err := pathrs.OpenInRoot(root, path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open %s in rootfs %s: %w", path, root, err)
	}
	defer handle.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(handle.Fd()), &st); err != nil {
		return fmt.Errorf("stat %s in rootfs %s: %w", path, root, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		// A FIFO or device here would block or read the host's device.
		return fmt.Errorf("%w: %s in the image is not a regular file", ErrInvalid, path)
	}
	f, err := pathrs.Reopen(handle, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open %s in rootfs %s: %w", path, root, err)
	}
	defer f.Close()
	if err := read(io.LimitReader(f, maxAccountsFile)); err != nil {
		return fmt.Errorf("%w: read %s in rootfs %s: %w", ErrInvalid, path, root, err)
	}
	return nil
}

// lookupUser resolves a user name or uid (ParseID); "" is root. A numeric
// uid needs no passwd entry; its gid then is 0.
func (a imageAccounts) lookupUser(name string) (User, error) {
	if name == "" {
		name = "0"
	}
	uid, numeric, err := ParseID(name)
	if err != nil {
		return User{}, fmt.Errorf("user: %w", err)
	}
	if !numeric && a.passwd == nil {
		return User{}, fmt.Errorf("%w: user %q: the image has no /etc/passwd to look it up", ErrInvalid, name)
	}
	for _, p := range a.passwd {
		if numeric && uint32(p.Uid) == uid || !numeric && p.Name == name {
			return User{UID: uint32(p.Uid), GID: uint32(p.Gid), Username: p.Name, Home: p.Home}, nil
		}
	}
	if numeric {
		return User{UID: uid}, nil
	}
	return User{}, fmt.Errorf("%w: user %q not found in the image's /etc/passwd", ErrInvalid, name)
}

// lookupGroup resolves a group name or gid (ParseID).
func (a imageAccounts) lookupGroup(group string) (uint32, error) {
	gid, numeric, err := ParseID(group)
	if err != nil {
		return 0, fmt.Errorf("group: %w", err)
	}
	if numeric {
		return gid, nil
	}
	if a.groups == nil {
		return 0, fmt.Errorf("%w: group %q: the image has no /etc/group to look it up", ErrInvalid, group)
	}
	for _, g := range a.groups {
		if g.Name == group {
			return uint32(g.Gid), nil
		}
	}
	return 0, fmt.Errorf("%w: group %q not found in the image's /etc/group", ErrInvalid, group)
}

// memberships lists the gids of the groups that name user as a member.
func (a imageAccounts) memberships(name string) []uint32 {
	if name == "" {
		return nil
	}
	var gids []uint32
	for _, g := range a.groups {
		if slices.Contains(g.List, name) {
			gids = append(gids, uint32(g.Gid))
		}
	}
	return gids
}

func uniqueIDs(ids []uint32) []uint32 {
	seen := make(map[uint32]bool, len(ids))
	out := ids[:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
