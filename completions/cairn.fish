# fish completion for cairn(1): commands and options as README.md lists them.
# REF arguments complete to the names of stored documents when a daemon
# already answers (`cairn --no-autostart ls`, at most 1 second; it never
# starts one).

set -l commands add get rm delete ls list du stat tag meta cp mv log status refresh stop key gc verify search mcp mount help

function __cairn_refs
    set -l tokens (commandline -opc)
    set -l conn
    for i in (seq 2 (count $tokens))
        switch $tokens[$i]
            case --socket --config
                set -a conn $tokens[$i] $tokens[(math $i + 1)]
            case '--socket=*' '--config=*'
                set -a conn $tokens[$i]
        end
    end
    # Lines of ls are "<hash>  <size>  <YYYY-MM-DD HH:MM>  <name>"; "-" is a
    # document without a name. Only the time has a ':' before the name.
    timeout 1 $tokens[1] --no-autostart $conn ls 2>/dev/null |
        string replace -r '^[^:]*:\d\d  ' '' | string match -v -- -
end

complete -c cairn -f
complete -c cairn -l socket -r -F -d "cairnd's socket"
complete -c cairn -l config -r -F -d "cairnd's config file"
complete -c cairn -l json -d 'Print one JSON object per line instead of text'
complete -c cairn -l no-autostart -d 'Fail (exit 3) instead of starting cairnd'
complete -c cairn -s q -l quiet -d 'No progress or summary on stderr'
complete -c cairn -s v -l verbose -d 'Progress and summary even when stderr is not a terminal'
complete -c cairn -l help -d 'Show the usage'
complete -c cairn -s V -l version -d 'Show the version'

complete -c cairn -n "not __fish_seen_subcommand_from $commands" -a add -d 'Store files'
complete -c cairn -n "not __fish_seen_subcommand_from $commands" -a get -d 'Write a document to standard output or a file'
complete -c cairn -n "not __fish_seen_subcommand_from $commands" -a 'rm delete' -d 'Remove names, delete documents'
complete -c cairn -n "not __fish_seen_subcommand_from $commands" -a 'ls list' -d 'List names or documents'
complete -c cairn -n "not __fish_seen_subcommand_from $commands" -a du -d 'Bytes under a path prefix'
complete -c cairn -n "not __fish_seen_subcommand_from $commands" -a stat -d "Show a document's details"
complete -c cairn -n "not __fish_seen_subcommand_from $commands" -a tag -d "Add or remove a document's tags"
complete -c cairn -n "not __fish_seen_subcommand_from $commands" -a meta -d "Set or remove a document's metadata"
complete -c cairn -n "not __fish_seen_subcommand_from $commands" -a cp -d "Give a document one more name"
complete -c cairn -n "not __fish_seen_subcommand_from $commands" -a mv -d "Rename a name"
complete -c cairn -n "not __fish_seen_subcommand_from $commands" -a log -d "List the versions of a name"
complete -c cairn -n "not __fish_seen_subcommand_from $commands" -a status -d "Show the daemon's state"
complete -c cairn -n "not __fish_seen_subcommand_from $commands" -a refresh -d 'Read now what the other daemons of a shared bucket wrote'
complete -c cairn -n "not __fish_seen_subcommand_from $commands" -a stop -d 'Stop the daemon serving the socket'
complete -c cairn -n "not __fish_seen_subcommand_from $commands" -a key -d 'The passphrases of an encrypted store'
complete -c cairn -n "__fish_seen_subcommand_from key" -a 'list add remove passwd'
complete -c cairn -n "__fish_seen_subcommand_from key" -l new-password-file -r -d 'Read the new passphrase from the file'
complete -c cairn -n "not __fish_seen_subcommand_from $commands" -a gc -d 'Reclaim what no document uses any more'
complete -c cairn -n "not __fish_seen_subcommand_from $commands" -a verify -d 'Re-read and check stored chunks'
complete -c cairn -n "not __fish_seen_subcommand_from $commands" -a search -d 'Ranked full-text search'
complete -c cairn -n "not __fish_seen_subcommand_from $commands" -a mcp -d 'Serve the Model Context Protocol on stdin/stdout'
complete -c cairn -n "not __fish_seen_subcommand_from $commands" -a mount -d 'Show the documents as a read-only file system'
complete -c cairn -n "not __fish_seen_subcommand_from $commands" -a help -d 'Show the usage, or the usage of a command'
complete -c cairn -n '__fish_seen_subcommand_from help' -a "$commands"

complete -c cairn -n '__fish_seen_subcommand_from add' -F
complete -c cairn -n '__fish_seen_subcommand_from add' -s r -l recursive -d 'Add the regular files under directories'
complete -c cairn -n '__fish_seen_subcommand_from add' -s L -l dereference -d 'With -r, follow links to regular files'
complete -c cairn -n '__fish_seen_subcommand_from add' -l heal -d 'Only rewrite the chunks verify found damaged, store no document'
complete -c cairn -n '__fish_seen_subcommand_from add' -l exclude -x -d 'Leave out what -r finds that matches GLOB'
complete -c cairn -n '__fish_seen_subcommand_from add' -s n -l name -x -d 'Name of the document'
complete -c cairn -n '__fish_seen_subcommand_from add' -s t -l tag -x -d 'Add a tag'
complete -c cairn -n '__fish_seen_subcommand_from add' -s m -l meta -x -d 'Add metadata KEY=VALUE'
complete -c cairn -n '__fish_seen_subcommand_from add' -l mime -x -d 'Mime type'

complete -c cairn -n '__fish_seen_subcommand_from get' -s o -l output -r -F -d 'Write to FILE'
complete -c cairn -n '__fish_seen_subcommand_from get' -l range -x -d 'Only bytes START-END'
complete -c cairn -n '__fish_seen_subcommand_from get' -s r -l recursive -d 'Restore the names under PREFIX to DIR'
complete -c cairn -n '__fish_seen_subcommand_from rm delete' -s n -l dry-run -d 'Print what would go, change nothing'
complete -c cairn -n '__fish_seen_subcommand_from get rm delete stat tag meta cp mv log verify' -a '(__cairn_refs)'
complete -c cairn -n '__fish_seen_subcommand_from log' -s n -l max-count -x -d 'At most the N newest versions'
complete -c cairn -n '__fish_seen_subcommand_from tag meta' -s d -l delete -d 'Remove instead'
complete -c cairn -n '__fish_seen_subcommand_from status' -l format -x -a 'text json prometheus' -d 'text, json or the Prometheus metrics'

complete -c cairn -n '__fish_seen_subcommand_from ls list' -s t -l tag -x -d 'Only documents with this tag'
complete -c cairn -n '__fish_seen_subcommand_from ls list' -s l -l long -d 'Full hash, sizes, mime type, time'
complete -c cairn -n '__fish_seen_subcommand_from ls list du' -s h -l human-readable -d 'Sizes in KiB, MiB, GiB'
complete -c cairn -n '__fish_seen_subcommand_from ls list' -s d -l docs -d 'One line per document'

complete -c cairn -n '__fish_seen_subcommand_from search' -s l -l limit -x -d 'Hits to show (1-1000, default 10)'
complete -c cairn -n '__fish_seen_subcommand_from search' -l offset -x -d 'Hits to skip'
complete -c cairn -n '__fish_seen_subcommand_from search' -s t -l tag -x -d 'Only documents with the tag'
complete -c cairn -n '__fish_seen_subcommand_from search' -l name -x -d 'Only names matching the glob'
complete -c cairn -n '__fish_seen_subcommand_from search' -l mime -x -d 'Only this mime type'
complete -c cairn -n '__fish_seen_subcommand_from search' -l after -x -d 'Only documents created after DATE'
complete -c cairn -n '__fish_seen_subcommand_from search' -l before -x -d 'Only documents created before DATE'
complete -c cairn -n '__fish_seen_subcommand_from search' -l fuzzy -d 'Tolerate typos'
complete -c cairn -n '__fish_seen_subcommand_from add ls list search log' -s 0 -l null -d 'Refs alone, each ended by a NUL'
complete -c cairn -n '__fish_seen_subcommand_from search' -l all -d 'Only documents with every word'

complete -c cairn -n '__fish_seen_subcommand_from mount' -a '(__fish_complete_directories)'
complete -c cairn -n '__fish_seen_subcommand_from mcp' -l allow-path -r -a '(__fish_complete_directories)' -d 'Let add read the regular files below the directory'
complete -c cairn -n '__fish_seen_subcommand_from mount' -s f -l foreground -d 'Stay in the foreground'
