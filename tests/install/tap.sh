# TAP helpers sourced by tests/install/lint.sh and dist.sh.
# ok NAME: a pass.  not_ok NAME [DETAIL FILE]: a failure, with the file's
# first lines as TAP comments.  skip NAME WHY: a check whose tool is missing.
n=0
passed=0
failed=0
skipped=0
ok() {
    n=$((n + 1)); passed=$((passed + 1))
    echo "ok $n - $1"
}
not_ok() {
    n=$((n + 1)); failed=$((failed + 1))
    echo "not ok $n - $1"
    [ $# -gt 1 ] && sed 's/^/# /' "$2" | head -n 40
}
skip() {
    n=$((n + 1)); skipped=$((skipped + 1))
    echo "ok $n - $1 # SKIP $2"
}
