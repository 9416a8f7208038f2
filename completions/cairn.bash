# bash completion for cairn(1): commands and options as README.md lists
# them. REF arguments complete to the names of stored documents when a daemon
# already answers (`cairn --no-autostart ls`, at most 1 second; it never
# starts one). Needs nothing from the bash-completion package.

_cairn()
{
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
    local global_opts='--socket --config --json --no-autostart -q --quiet -v --verbose --help -V --version'
    local commands='add get rm delete ls list du stat tag meta cp mv log status refresh stop key gc verify search mcp mount help'
    COMPREPLY=()

    # bash splits --socket=PATH and --config=FILE at '='.
    local before=${COMP_WORDS[COMP_CWORD - 2]}
    if [[ $cur == = && ($prev == --socket || $prev == --config) ]]; then
        cur=''
    elif [[ $prev == = && ($before == --socket || $before == --config) ]]; then
        prev=$before
    fi

    # The command, any --socket and --config, and whether -- ended the options.
    local i=1 w cmd='' dashdash='' conn=()
    while ((i < COMP_CWORD)); do
        w=${COMP_WORDS[i]}
        if [[ ($w == --socket || $w == --config) && ! $dashdash ]]; then
            ((i++))
            [[ ${COMP_WORDS[i]} == = ]] && ((i++))
            conn+=("$w" "${COMP_WORDS[i]}")
        elif [[ ($w == --socket=* || $w == --config=*) && ! $dashdash ]]; then
            conn+=("$w")
        elif [[ $w == -- && $cmd ]]; then
            dashdash=1
        elif [[ ! $cmd && $w != -* ]]; then
            cmd=$w
        fi
        ((i++))
    done

    if [[ ! $dashdash ]]; then
        case $prev in
            --socket | --config | -o | --output | --new-password-file)
                compopt -o filenames 2>/dev/null
                mapfile -t COMPREPLY < <(compgen -f -- "$cur")
                return
                ;;
            --allow-path)
                compopt -o filenames 2>/dev/null
                mapfile -t COMPREPLY < <(compgen -d -- "$cur")
                return
                ;;
            -n | -t | -m | --mime | --exclude | -l | --offset | --name | --after | --before | --range | --tag | --meta | --limit)
                [[ $cmd ]] && return
                ;;
        esac
    fi

    if [[ ! $cmd ]]; then
        if [[ $cur == -* ]]; then
            mapfile -t COMPREPLY < <(compgen -W "$global_opts" -- "$cur")
        else
            mapfile -t COMPREPLY < <(compgen -W "$commands" -- "$cur")
        fi
        return
    fi

    if [[ $cur == -* && ! $dashdash ]]; then
        local opts=''
        case $cmd in
            add) opts='-r --recursive -L --dereference --exclude -n --name -t --tag -m --meta --mime --heal -0 --null' ;;
            get) opts='-o --output -r --recursive --range' ;;
            rm | delete) opts='-n --dry-run' ;;
            ls | list) opts='-l --long -h --human-readable -d --docs -t --tag -0 --null' ;;
            du) opts='-h --human-readable' ;;
            log) opts='-n --max-count -0 --null' ;;
            tag | meta) opts='-d --delete' ;;
            status) opts='--format' ;;
            key) opts='--new-password-file' ;;
            mount) opts='-f --foreground' ;;
            mcp) opts='--allow-path' ;;
            search) opts='-l --limit --offset -t --tag --name --mime --after --before --fuzzy --all -0 --null' ;;
        esac
        mapfile -t COMPREPLY < <(compgen -W "$opts $global_opts" -- "$cur")
        return
    fi

    local line
    case $cmd in
        add)
            compopt -o filenames 2>/dev/null
            mapfile -t COMPREPLY < <(compgen -f -- "$cur")
            ;;
        mount)
            compopt -o filenames 2>/dev/null
            mapfile -t COMPREPLY < <(compgen -d -- "$cur")
            ;;
        help)
            mapfile -t COMPREPLY < <(compgen -W "$commands" -- "$cur")
            ;;
        get | rm | delete | stat | tag | meta | cp | mv | log | verify)
            # ls -0: each name as stored, ended by a NUL (a document without a
            # name by its hash), so names with newlines come through whole.
            # Names go back quoted for the shell (spaces, quotes, $); what was
            # typed is compared with its backslashes taken out.
            local typed=${cur//\\/}
            while IFS= read -r -d '' line; do
                [[ $line == "$typed"* ]] && COMPREPLY+=("$(printf '%q' "$line")")
            done < <(timeout 1 "${COMP_WORDS[0]}" --no-autostart "${conn[@]}" ls -0 2>/dev/null)
            ;;
    esac
} &&
    complete -F _cairn cairn
