# images.t: images bcd refuses, through the whole stack: the catalog names
# an https image with a wrong sha256, or a qcow2 that names a backing file
# of its own; the instance never runs, reports why (the controller shows
# the reason), and no domain, overlay or verified image is left for it.
. "$(dirname "$0")/lib.sh"

e2e_need
# the images are small files served next to the guest image
W=$(mktemp -d /tmp/bc-e2e-img.XXXXXX)
chmod 0755 "$W"
tap_on_exit rm -rf "$W"
cp "$E2E_GUEST_DIR/guest.qcow2.sha256" "$W/"
ln -s "$E2E_GUEST_DIR/guest.qcow2" "$W/guest.qcow2"
qemu-img create -q -f qcow2 "$W/plain.qcow2" 64M
qemu-img create -q -f qcow2 -F raw -b /etc/hostname "$W/backing.qcow2" 64M
E2E_GUEST_DIR=$W
e2e_up --agents 1 --agent-capacity 4,4096,50 || bail_out "the stack did not come up"

# image NAME FILE SHA256: register FILE as image NAME, print its id.
image() {
	bcctl --format json image create --name "$1" --format qcow2 --url "$HTTPS_URL/$2" \
		--sha256 "$3" --size "$(stat -L -c%s "$W/$2")" | jq -r '.id // empty'
}
sha() { sha256sum "$W/$1" | cut -d' ' -f1; }

# refused ID REGEX: the instance is not running and its reason matches REGEX.
refused() {
	local j st why
	j=$(e2e_instance_json "$1")
	st=$(printf '%s' "$j" | jq -r '.state // empty')
	why=$(printf '%s' "$j" | jq -r '.reason // empty')
	[ "$st" != running ] && [ "$st" != provisioning ] && printf '%s' "$why" | grep -Eq "$2"
}
check_refused() {
	local id=$1 re=$2 what=$3 j
	eventually 180 refused "$id" "$re"
	ok $? "$what: refused with a reason"
	j=$(e2e_instance_json "$id")
	diag "$what: state $(printf '%s' "$j" | jq -r .state), reason: $(printf '%s' "$j" | jq -r .reason)"
	ok "! virsh -q dominfo '$id' >/dev/null 2>&1" "$what: no domain"
	ok "! test -e '$(e2e_instance_dir "$id")/disk.qcow2'" "$what: no overlay"
}

# a wrong sha256: the sha256 of another file, which the next image (another
# URL) claims truly: a failure is held per digest and URL, not per digest
bad=$(image wrong-sha plain.qcow2 "$(sha backing.qcow2)")
like "$bad" '^img_' "an image whose sha256 is wrong is registered"
id=$(E2E_IMAGE=$bad e2e_instance_create --key wrong-sha)
like "$id" '^inst_' "an instance of it ($id)"
check_refused "$id" 'ImageDigestMismatch' "wrong sha256"
ok "! test -e '$STACK_DIR/data-1/images/$(sha backing.qcow2)'" "wrong sha256: nothing stored under the claimed digest"
ok "! test -e '$STACK_DIR/data-1/images/$(sha plain.qcow2)'" "wrong sha256: nothing stored under the real digest either"

# a qcow2 naming a backing file, with its true sha256
back=$(image backing backing.qcow2 "$(sha backing.qcow2)")
like "$back" '^img_' "an image naming a backing file is registered"
id2=$(E2E_IMAGE=$back e2e_instance_create --key backing)
check_refused "$id2" 'backing' "backing file"

# the same agent still runs a good image (the refusals left it healthy)
good=$(image plain plain.qcow2 "$(sha plain.qcow2)")
id3=$(E2E_IMAGE=$good e2e_instance_create --key plain)
running() { instance_state_is "$id3" running; }
eventually 180 running
ok $? "a clean image on the same agent runs ($(instance_state "$id3"))"
done_testing
