# bash completion for cairnd(8): its flags as `cairnd --help` and README.md
# list them, and the values they take. Needs nothing from the
# bash-completion package.

_cairnd()
{
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
    local flags='--socket --data-dir --backend --log-level --config --encryption --read-only --rebuild-index --upgrade --print-config --help --version'
    COMPREPLY=()
    # bash splits --flag=VALUE at '='.
    if [[ $cur == = ]]; then
        cur=''
    elif [[ $prev == = ]]; then
        prev=${COMP_WORDS[COMP_CWORD - 2]}
    fi
    case $prev in
    --socket | --config)
        compopt -o filenames 2>/dev/null
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
        return
        ;;
    --data-dir)
        compopt -o filenames 2>/dev/null
        mapfile -t COMPREPLY < <(compgen -d -- "$cur")
        return
        ;;
    --backend)
        compopt -o nospace 2>/dev/null
        mapfile -t COMPREPLY < <(compgen -W 'local local:/ sftp:// s3:// r2:// azure://' -- "$cur")
        return
        ;;
    --log-level)
        mapfile -t COMPREPLY < <(compgen -W 'error warn info debug' -- "$cur")
        return
        ;;
    --encryption)
        mapfile -t COMPREPLY < <(compgen -W 'on off' -- "$cur")
        return
        ;;
    esac
    mapfile -t COMPREPLY < <(compgen -W "$flags" -- "$cur")
}
complete -F _cairnd cairnd
