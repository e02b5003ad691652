# Sourced by the scripts that build a tool from a module of their own under
# hack/ (build-kubelet.sh, build-cri-tools.sh) and cache it outside the
# repository, so that every clone and worktree on the machine shares one
# build. Run from that module's directory.
#
# cache_entry NAME MODULE FILE [ARG]: the cache entry of the tool NAME,
# keyed by the version of MODULE that go.mod requires and the sha256 of
# go.sum (a version bump, or any dependency change, builds again). It sets
# version, dir (the entry) and out (dir/FILE). With ARG --path it prints out
# and exits the script; otherwise it makes dir and holds its lock (fd 9) for
# the rest of the script: one build at a time per entry, a second caller
# waits, then reuses.
#
# MINICRI_CACHE (default /var/cache/minicri-test) moves the cache.
cache_entry() {
	local name=$1 module=$2 file=$3 arg=${4:-}
	# The require line, alone or in a require block.
	version=$(awk -v m="$module" '$1 == "require" && $2 == m { print $3; exit } $1 == m && $2 ~ /^v/ { print $2; exit }' go.mod)
	if [ -z "$version" ]; then
		echo "build-$name: no require of $module in hack/$name/go.mod" >&2
		exit 1
	fi
	dir="${MINICRI_CACHE:-/var/cache/minicri-test}/$name-$version-$(sha256sum go.sum | cut -c1-12)"
	out="$dir/$file"
	if [ "$arg" = "--path" ]; then
		echo "$out"
		exit 0
	fi
	mkdir -p "$dir"
	exec 9>"$dir/.lock"
	flock 9
}

# layout DIR IMAGES SPEC...: makes the OCI layout DIR with the images program
# IMAGES (hack/cluster/images) from the image specs, again only when a spec,
# the name or link target of a file it names, or the content of one changed
# since the last time. A file reached by many links (busybox's applets) is
# read once.
layout() {
	local dir=$1 images=$2 inputs s f
	shift 2
	inputs=$({
		printf '%s\n' "$@"
		for s in "$@"; do for f in ${s#* * }; do find "${f%%=*}" -printf '%p %l\n' | sort; done; done
		for s in "$@"; do for f in ${s#* * }; do find -L "${f%%=*}" -type f -print0 | xargs -0r realpath -z; done; done \
			| sort -zu | xargs -0r sha256sum
	} | sha256sum | cut -c1-64)
	if [ "$(cat "$dir/.inputs" 2>/dev/null)" != "$inputs" ]; then
		echo "build: making the images of $dir" >&2
		rm -rf "$dir.new"
		"$images" build "$dir.new" "$@"
		echo "$inputs" >"$dir.new/.inputs"
		rm -rf "$dir"
		mv "$dir.new" "$dir"
	fi
}
