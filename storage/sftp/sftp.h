#pragma once

/*
 * The SFTP backend, sftp://USER@HOST[:PORT]/PATH[?...] (options in
 * sftp-url.c): objects are files under PATH on an SSH server, each request
 * run by a worker thread with its own session, so that a slow or dead
 * server never blocks the loop. The backend's files share sftp-int.h.
 */

#include "storage/backend.h"

extern const struct backend_ops backend_sftp_ops;
