# Sourced by the scripts that run on a GPU machine (server-example.sh, gpu-*.sh): their files live in a private
# temporary folder (mktemp -d, 0700), never under fixed names in the shared /tmp that another user of the machine
# could make first and fill — a Python package first on PYTHONPATH, a model whose code runs with
# --trust-remote-code. The one fixed name left, the model folder the params name, is used only when it is this
# user's own (the rule of the kit's safefiles.own_folder, here in the shell).

# own_folder PATH [made]: PATH is a folder of this user's that no one else can write — made (0700) when it is
# missing and a second argument says so; else a line on stderr saying why not, and status 1.
own_folder() {
  local path=$1
  if [ -n "${2:-}" ] && [ ! -e "$path" ] && [ ! -L "$path" ]; then
    mkdir -m 700 -- "$path" || return 1
  fi
  if [ -L "$path" ] || [ ! -d "$path" ]; then
    echo "$path is not a folder of yours (a symbolic link, or no folder, owned by $(stat -c %U -- "$path" 2>/dev/null));" \
      "remove it if it is yours, or point the script elsewhere" >&2
    return 1
  fi
  if [ ! -O "$path" ]; then
    echo "$path belongs to $(stat -c %U -- "$path"), not to you: another user made it first and could have put" \
      "anything in it; the script will not use it" >&2
    return 1
  fi
  case $(stat -c %A -- "$path") in
    ?????w*|????????w*) echo "$path is writable by other users ($(stat -c %A -- "$path")): chmod go-w it" >&2; return 1 ;;
  esac
}

# private_tmp RECORD: a private folder that stays the same across calls: the one the file RECORD (in the project)
# names while it is still this user's alone (0700), else a fresh `mktemp -d`, recorded there.
private_tmp() {
  local record=$1 folder=""
  if [ -f "$record" ] && [ ! -L "$record" ]; then folder=$(head -c 4096 -- "$record"); fi
  if [ -z "$folder" ] || ! own_folder "$folder" 2> /dev/null || [ "$(stat -c %a -- "$folder")" != 700 ]; then
    folder=$(mktemp -d "${TMPDIR:-/tmp}/launchlab-XXXXXXXX") || return 1
    mkdir -p -- "$(dirname -- "$record")" && printf '%s\n' "$folder" > "$record" || return 1
  fi
  printf '%s\n' "$folder"
}

# own_model PATH: the model folder the params name, made here (mkdir, which fails on a name that is there) or, when
# it is there, used only if it is this user's own; status 1 with a line saying why otherwise. Prints `new` when
# it made the folder (the model is still to be written into it).
own_model() {
  local path=$1
  if mkdir -m 755 -- "$path" 2> /dev/null; then echo new; return 0; fi
  own_folder "$path"
}
