# fish completion for cairnd(8): its flags as `cairnd --help` and README.md
# list them, and the values they take.

complete -c cairnd -f
complete -c cairnd -l socket -r -F -d 'Unix socket to listen on'
complete -c cairnd -l data-dir -r -a '(__fish_complete_directories)' -d 'Metadata database and local objects'
complete -c cairnd -l backend -x -a 'local local:/ sftp:// s3:// r2:// azure://' -d 'Object backend URL'
complete -c cairnd -l log-level -x -a 'error warn info debug' -d 'What is logged'
complete -c cairnd -l config -r -F -d 'INI configuration file'
complete -c cairnd -l encryption -x -a 'on off' -d 'For a store made at this start'
complete -c cairnd -l read-only -d 'Serve the data directory and write nothing to it'
complete -c cairnd -l rebuild-index -d 'Recreate the metadata database from the packs, then exit'
complete -c cairnd -l upgrade -d 'Convert a data directory of format 1 to packs, then exit'
complete -c cairnd -l print-config -d 'Print the effective settings, then exit'
complete -c cairnd -l help -d 'Show the usage'
complete -c cairnd -l version -d 'Show the version'
