# catalog.t: the operator's catalog: flavors and images page by name and
# delete softly (the name is free again), pools refuse deletion while they
# hold nodes or instances.
. "$(dirname "$0")/../lib/stack.sh"

stack_up --controllers 1 --agents 1 --agent-capacity 4,8192,50 || bail_out "stack_up failed"

for n in cat-a cat-b cat-c; do
	bcctl flavor create --name "$n" --vcpus 2 --memory-mib 1024 --disk-gib 5 >/dev/null || fail "flavor $n"
	stack_image_create "img-$n" >/dev/null || fail "image $n"
done

page1=$(bcctl --format json flavor list --limit 2)
is "$(json_items "$page1" | jq -r .name | paste -sd,)" 'cat-a,cat-b' 'flavors are listed by name, two per page'
cursor=$(json_get "$page1" cursor)
is "$cursor" cat-b 'the cursor is the last name of the page'
page2=$(bcctl --format json flavor list --limit 2 --cursor "$cursor")
is "$(json_items "$page2" | jq -r .name | paste -sd,)" 'cat-c,sbx.small' 'the next page continues after it'

out=$(bcctl --format json flavor delete cat-b)
is "$(json_get "$out" flavor | jq -r .name)" cat-b 'flavor delete answers the deleted flavor'
bcctl flavor get cat-b >/dev/null 2>&1
is "$?" 3 'a deleted flavor is NOT_FOUND'
bcctl flavor create --name cat-b --vcpus 1 --memory-mib 512 --disk-gib 1 >/dev/null
is "$?" 0 'its name can be used again'

imgs=$(bcctl --format json image list --limit 10)
is "$(json_items "$imgs" | jq -r .name | grep -c '^img-cat-')" 3 'three images listed'
id=$(json_items "$imgs" | jq -r 'select(.name == "img-cat-a") | .id')
out=$(bcctl --format json image delete "$id")
is "$(json_get "$out" image | jq -r .id)" "$id" 'image delete by id answers the image'
bcctl image get img-cat-a >/dev/null 2>&1
is "$?" 3 'a deleted image is NOT_FOUND by name'
bcctl instance create --pool "$POOL_ID" --flavor cat-a --image img-cat-a >/dev/null 2>&1
is "$?" 2 'a deleted image cannot be used (INVALID_INPUT)'

# a pool with a node is in use
bcctl pool delete "$POOL_ID" >/dev/null 2>"$STACK_DIR/err"
is "$?" 4 'a pool with a node is CONFLICT'
like "$(cat "$STACK_DIR/err")" 'pool-in-use' 'details.reason pool-in-use'
out=$(bcctl --format json pool create --name empty-pool --runtime fake --bridge br9)
pid=$(json_get "$out" id)
out=$(bcctl --format json pool delete "$pid")
is "$(json_get "$out" pool | jq -r .id)" "$pid" 'an empty pool is deleted'
bcctl pool get "$pid" >/dev/null 2>&1
is "$?" 3 'then NOT_FOUND'

done_testing
