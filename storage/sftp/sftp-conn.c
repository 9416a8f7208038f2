/*
 * One SSH session: TCP connect with a timeout, the handshake, the host key
 * checked against known_hosts, public key authentication, and the SFTP
 * channel. Runs on worker threads (and once at open), never on the loop.
 */
#include "storage/sftp/sftp-int.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* A connected, blocking socket, or -1 with msg. */
static int connect_fd(const struct sftp_opts *o, char *msg, size_t msg_len)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *ai;
    char port[8];
    int fd = -1, err = 0, r;

    snprintf(port, sizeof(port), "%u", o->port);
    r = getaddrinfo(o->host, port, &hints, &res);
    if (r != 0) {
        snprintf(msg, msg_len, "sftp: cannot resolve %s: %s", o->host, gai_strerror(r));
        return -1;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
            err = errno;
        } else {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            socklen_t sl = sizeof(err);
            r = poll(&pfd, 1, (int)o->timeout_ms);
            if (r == 0)
                err = ETIMEDOUT;
            else if (r < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) < 0)
                err = errno;
        }
        if (err == 0)
            break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(msg, msg_len, "sftp: cannot connect to %s port %u: %s", o->host, o->port,
                 strerror(err ? err : EHOSTUNREACH));
        return -1;
    }
    int one = 1, flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    return fd;
}

/* The known_hosts key type of a session host key type; 0 if there is none. */
static int knownhost_type(int hostkey_type)
{
    switch (hostkey_type) {
    case LIBSSH2_HOSTKEY_TYPE_RSA:
        return LIBSSH2_KNOWNHOST_KEY_SSHRSA;
    case LIBSSH2_HOSTKEY_TYPE_DSS:
        return LIBSSH2_KNOWNHOST_KEY_SSHDSS;
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_256:
        return LIBSSH2_KNOWNHOST_KEY_ECDSA_256;
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_384:
        return LIBSSH2_KNOWNHOST_KEY_ECDSA_384;
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_521:
        return LIBSSH2_KNOWNHOST_KEY_ECDSA_521;
    case LIBSSH2_HOSTKEY_TYPE_ED25519:
        return LIBSSH2_KNOWNHOST_KEY_ED25519;
    default:
        return 0;
    }
}

static const char *knownhost_alg(int kt)
{
    switch (kt) {
    case LIBSSH2_KNOWNHOST_KEY_SSHRSA:
        return "rsa-sha2-512,rsa-sha2-256,ssh-rsa";
    case LIBSSH2_KNOWNHOST_KEY_SSHDSS:
        return "ssh-dss";
    case LIBSSH2_KNOWNHOST_KEY_ECDSA_256:
        return "ecdsa-sha2-nistp256";
    case LIBSSH2_KNOWNHOST_KEY_ECDSA_384:
        return "ecdsa-sha2-nistp384";
    case LIBSSH2_KNOWNHOST_KEY_ECDSA_521:
        return "ecdsa-sha2-nistp521";
    case LIBSSH2_KNOWNHOST_KEY_ED25519:
        return "ssh-ed25519";
    default:
        return NULL;
    }
}

/* The name known_hosts uses for the host: "host", or "[host]:port" off port 22. */
static void host_entry_name(const struct sftp_opts *o, char *out, size_t len)
{
    if (o->port == 22)
        snprintf(out, len, "%s", o->host);
    else
        snprintf(out, len, "[%s]:%u", o->host, o->port);
}

/*
 * Prefers the host key algorithms known_hosts has a key of for this host
 * (plain names only; hashed names cannot be matched without a key), so that
 * the server does not hand us a key of another type we would not recognise.
 */
static void prefer_known_types(LIBSSH2_SESSION *ssh, LIBSSH2_KNOWNHOSTS *kh,
                               const struct sftp_opts *o)
{
    char name[300], pref[512] = "";
    struct libssh2_knownhost *e = NULL;
    unsigned seen = 0;

    host_entry_name(o, name, sizeof(name));
    while (libssh2_knownhost_get(kh, &e, e) == 0) {
        int kt = e->typemask & LIBSSH2_KNOWNHOST_KEY_MASK;
        const char *alg = knownhost_alg(kt);
        unsigned bit = 1u << ((unsigned)kt >> LIBSSH2_KNOWNHOST_KEY_SHIFT);
        if (!alg || !e->name || (seen & bit) ||
            (strcmp(e->name, name) != 0 && strcmp(e->name, o->host) != 0))
            continue;
        seen |= bit;
        size_t l = strlen(pref);
        snprintf(pref + l, sizeof(pref) - l, "%s%s", l ? "," : "", alg);
    }
    if (pref[0])
        libssh2_session_method_pref(ssh, LIBSSH2_METHOD_HOSTKEY, pref);
}

static void fingerprint(LIBSSH2_SESSION *ssh, char *out, size_t len)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *h =
        (const unsigned char *)libssh2_hostkey_hash(ssh, LIBSSH2_HOSTKEY_HASH_SHA256);
    size_t o = snprintf(out, len, "SHA256:");

    if (!h) {
        snprintf(out, len, "(unknown)");
        return;
    }
    /* 32 bytes: ten whole groups of three, then two bytes; OpenSSH drops the '='. */
    for (int i = 0; i < 32 && o + 5 < len; i += 3) {
        unsigned v = (unsigned)h[i] << 16 | (i + 1 < 32 ? (unsigned)h[i + 1] << 8 : 0) |
                     (i + 2 < 32 ? h[i + 2] : 0);
        int chars = i + 2 < 32 ? 4 : 3;
        for (int k = 0; k < chars; k++)
            out[o++] = b64[(v >> (18 - 6 * k)) & 63];
    }
    out[o] = '\0';
}

/* Appends one line for a newly accepted host (never rewrites the file). */
static int record_host(LIBSSH2_KNOWNHOSTS *kh, struct libssh2_knownhost *added, const char *file)
{
    char line[4096];
    size_t n;
    FILE *f;

    if (libssh2_knownhost_writeline(kh, added, line, sizeof(line), &n,
                                    LIBSSH2_KNOWNHOST_FILE_OPENSSH))
        return -EINVAL;
    f = fopen(file, "a");
    if (!f)
        return -errno;
    int ok = fwrite(line, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    return ok ? 0 : -EIO;
}

static int check_host_key(struct sftp_conn *c, const struct sftp_opts *o, char *msg, size_t msg_len)
{
    LIBSSH2_KNOWNHOSTS *kh = libssh2_knownhost_init(c->ssh);
    struct libssh2_knownhost *found = NULL, *added = NULL;
    char name[300], fp[64];
    const char *key;
    size_t key_len;
    int type, kt, r;

    if (!kh) {
        snprintf(msg, msg_len, "sftp: out of memory");
        return -ENOMEM;
    }
    /* A missing file is an empty list; a file that cannot be parsed is an error. */
    if (access(o->known_hosts, F_OK) == 0 &&
        libssh2_knownhost_readfile(kh, o->known_hosts, LIBSSH2_KNOWNHOST_FILE_OPENSSH) < 0) {
        snprintf(msg, msg_len, "sftp: cannot read known_hosts file %s", o->known_hosts);
        libssh2_knownhost_free(kh);
        return -EINVAL;
    }
    key = libssh2_session_hostkey(c->ssh, &key_len, &type);
    kt = knownhost_type(type);
    if (!key || !kt) {
        snprintf(msg, msg_len, "sftp: %s sent a host key of an unsupported type", o->host);
        libssh2_knownhost_free(kh);
        return -EPROTO;
    }
    fingerprint(c->ssh, fp, sizeof(fp));
    host_entry_name(o, name, sizeof(name));
    r = libssh2_knownhost_checkp(kh, o->host, (int)o->port, key, key_len,
                                 LIBSSH2_KNOWNHOST_TYPE_PLAIN | LIBSSH2_KNOWNHOST_KEYENC_RAW | kt,
                                 &found);
    switch (r) {
    case LIBSSH2_KNOWNHOST_CHECK_MATCH:
        r = 0;
        break;
    case LIBSSH2_KNOWNHOST_CHECK_MISMATCH:
        snprintf(msg, msg_len,
                 "sftp: the host key of %s does not match %s (it is now %s): refusing to "
                 "connect; if the server's key really changed, remove the old line from %s",
                 name, o->known_hosts, fp, o->known_hosts);
        r = -EACCES;
        break;
    case LIBSSH2_KNOWNHOST_CHECK_NOTFOUND:
        /*
         * No key of this type is recorded, but one of another type may be:
         * then this is no new host but a changed key (a machine in the
         * middle offering another type), refused like any other. Hashed
         * entries cannot be told apart by name; a check of the key against
         * every type matches the host name however the entry is written.
         */
        if (libssh2_knownhost_checkp(kh, o->host, (int)o->port, key, key_len,
                                     LIBSSH2_KNOWNHOST_TYPE_PLAIN | LIBSSH2_KNOWNHOST_KEYENC_RAW,
                                     NULL) == LIBSSH2_KNOWNHOST_CHECK_MISMATCH) {
            snprintf(msg, msg_len,
                     "sftp: %s has a host key of another type in %s, and now offers a %s key "
                     "(%s): refusing to connect; if the server's key really changed, remove "
                     "the old line from %s",
                     name, o->known_hosts, knownhost_alg(kt) ? knownhost_alg(kt) : "new", fp,
                     o->known_hosts);
            r = -EACCES;
            break;
        }
        if (!o->accept_new_host) {
            snprintf(msg, msg_len,
                     "sftp: unknown host key for %s (%s) is not in %s: add it (ssh-keyscan) or "
                     "set accept_new_host=1",
                     name, fp, o->known_hosts);
            r = -EACCES;
            break;
        }
        r = libssh2_knownhost_addc(kh, name, NULL, key, key_len, NULL, 0,
                                   LIBSSH2_KNOWNHOST_TYPE_PLAIN | LIBSSH2_KNOWNHOST_KEYENC_RAW | kt,
                                   &added);
        if (r == 0)
            r = record_host(kh, added, o->known_hosts);
        if (r != 0)
            snprintf(msg, msg_len, "sftp: cannot record the host key of %s in %s", name,
                     o->known_hosts);
        else
            snprintf(msg, msg_len, "sftp: recorded the new host key of %s (%s) in %s", name, fp,
                     o->known_hosts);
        break;
    default:
        snprintf(msg, msg_len, "sftp: cannot check the host key of %s", name);
        r = -EPROTO;
        break;
    }
    libssh2_knownhost_free(kh);
    return r;
}

static int auth_agent(LIBSSH2_SESSION *ssh, const char *user)
{
    LIBSSH2_AGENT *agent;
    struct libssh2_agent_publickey *id = NULL, *prev = NULL;
    int r = -1;

    if (!getenv("SSH_AUTH_SOCK") || !(agent = libssh2_agent_init(ssh)))
        return -1;
    if (libssh2_agent_connect(agent) == 0 && libssh2_agent_list_identities(agent) == 0) {
        while (libssh2_agent_get_identity(agent, &id, prev) == 0) {
            if (libssh2_agent_userauth(agent, user, id) == 0) {
                r = 0;
                break;
            }
            prev = id;
        }
        libssh2_agent_disconnect(agent);
    }
    libssh2_agent_free(agent);
    return r;
}

static int authenticate(struct sftp_conn *c, const struct sftp_opts *o, char *msg, size_t msg_len)
{
    static const char *const defaults[] = {".ssh/id_ed25519", ".ssh/id_ecdsa", ".ssh/id_rsa"};
    const char *home = getenv("HOME");
    unsigned ulen = (unsigned)strlen(o->user);
    char path[SFTP_MAX_PATH + 64];

    if (o->key[0]) {
        if (access(o->key, R_OK) < 0) {
            snprintf(msg, msg_len, "sftp: cannot read the key file %s: %s", o->key,
                     strerror(errno));
            return -errno;
        }
        if (libssh2_userauth_publickey_fromfile_ex(c->ssh, o->user, ulen, NULL, o->key, NULL) == 0)
            return 0;
    } else {
        if (auth_agent(c->ssh, o->user) == 0)
            return 0;
        for (size_t i = 0; home && i < sizeof(defaults) / sizeof(defaults[0]); i++) {
            snprintf(path, sizeof(path), "%s/%s", home, defaults[i]);
            if (access(path, R_OK) == 0 && libssh2_userauth_publickey_fromfile_ex(
                                               c->ssh, o->user, ulen, NULL, path, NULL) == 0)
                return 0;
        }
    }
    if (libssh2_session_last_errno(c->ssh) == LIBSSH2_ERROR_TIMEOUT) {
        snprintf(msg, msg_len, "sftp: %s timed out during authentication", o->host);
        return BACKEND_E_UNAVAILABLE;
    }
    snprintf(msg, msg_len,
             "sftp: authentication failed for %s@%s with %s (only keys are used: "
             "key=FILE, ssh-agent, or ~/.ssh/id_*; passphrases need ssh-agent)",
             o->user, o->host, o->key[0] ? o->key : "ssh-agent and the default keys");
    return -EACCES;
}

void sftp_forget_handle(struct sftp_conn *c, const char *key)
{
    for (size_t i = 0; i < SFTP_HANDLE_CACHE; i++) {
        struct sftp_cached_handle *e = &c->cache[i];
        if (e->h && (!key || strcmp(e->key, key) == 0)) {
            libssh2_sftp_close_handle(e->h);
            e->h = NULL;
        }
    }
}

void sftp_disconnect(struct sftp_conn *c)
{
    if (c->ssh) {
        /*
         * A broken session still gets its handles closed and SFTP shut down,
         * which frees their memory; on a dead socket each call fails at once,
         * and a stalled server gets a second at most.
         */
        libssh2_session_set_timeout(c->ssh, c->broken ? 1000 : 2000);
        sftp_forget_handle(c, NULL);
        if (c->sftp)
            libssh2_sftp_shutdown(c->sftp);
        if (!c->broken)
            libssh2_session_disconnect(c->ssh, "cairn closing");
        libssh2_session_free(c->ssh);
    }
    if (c->fd >= 0)
        close(c->fd);
    c->ssh = NULL;
    c->sftp = NULL;
    c->fd = -1;
    c->broken = false;
}

int sftp_connect(struct sftp_conn *c, const struct sftp_opts *o, char *msg, size_t msg_len)
{
    LIBSSH2_KNOWNHOSTS *kh;
    int r;

    memset(c, 0, sizeof(*c));
    c->fd = connect_fd(o, msg, msg_len);
    if (c->fd < 0)
        return BACKEND_E_UNAVAILABLE;
    c->ssh = libssh2_session_init();
    if (!c->ssh) {
        sftp_disconnect(c);
        snprintf(msg, msg_len, "sftp: out of memory");
        return -ENOMEM;
    }
    libssh2_session_set_blocking(c->ssh, 1);
    libssh2_session_set_timeout(c->ssh, (long)o->timeout_ms);
    if ((kh = libssh2_knownhost_init(c->ssh))) {
        if (access(o->known_hosts, F_OK) == 0 &&
            libssh2_knownhost_readfile(kh, o->known_hosts, LIBSSH2_KNOWNHOST_FILE_OPENSSH) >= 0)
            prefer_known_types(c->ssh, kh, o);
        libssh2_knownhost_free(kh);
    }
    if ((r = libssh2_session_handshake(c->ssh, c->fd)) != 0) {
        char *err = NULL;
        libssh2_session_last_error(c->ssh, &err, NULL, 0);
        snprintf(msg, msg_len, "sftp: SSH handshake with %s failed: %s", o->host,
                 err ? err : "unknown error");
        c->broken = true;
        sftp_disconnect(c);
        return BACKEND_E_UNAVAILABLE;
    }
    msg[0] = '\0';
    if ((r = check_host_key(c, o, msg, msg_len)) != 0 ||
        (r = authenticate(c, o, msg, msg_len)) != 0) {
        c->broken = r == BACKEND_E_UNAVAILABLE;
        sftp_disconnect(c);
        return r;
    }
    c->sftp = libssh2_sftp_init(c->ssh);
    if (!c->sftp) {
        snprintf(msg, msg_len, "sftp: %s does not offer the SFTP subsystem", o->host);
        r = libssh2_session_last_errno(c->ssh);
        c->broken = true;
        sftp_disconnect(c);
        return r == LIBSSH2_ERROR_TIMEOUT || r == LIBSSH2_ERROR_SOCKET_RECV ||
                       r == LIBSSH2_ERROR_SOCKET_SEND || r == LIBSSH2_ERROR_SOCKET_DISCONNECT
                   ? BACKEND_E_UNAVAILABLE
                   : -EPROTO;
    }
    if (o->keepalive_s)
        libssh2_keepalive_config(c->ssh, 1, o->keepalive_s);
    return 0;
}

int sftp_status(struct sftp_conn *c, int rc)
{
    if (rc == LIBSSH2_ERROR_SFTP_PROTOCOL) {
        switch (libssh2_sftp_last_error(c->sftp)) {
        case LIBSSH2_FX_NO_SUCH_FILE:
        case LIBSSH2_FX_NO_SUCH_PATH:
            return BACKEND_E_NOT_FOUND;
        case LIBSSH2_FX_PERMISSION_DENIED:
        case LIBSSH2_FX_WRITE_PROTECT:
            return -EACCES;
        case LIBSSH2_FX_NO_SPACE_ON_FILESYSTEM:
        case LIBSSH2_FX_QUOTA_EXCEEDED:
            return -ENOSPC;
        case LIBSSH2_FX_FILE_ALREADY_EXISTS:
            return BACKEND_E_EXISTS;
        case LIBSSH2_FX_OP_UNSUPPORTED:
            return -EOPNOTSUPP;
        case LIBSSH2_FX_NO_CONNECTION:
        case LIBSSH2_FX_CONNECTION_LOST:
            c->broken = true;
            return BACKEND_E_UNAVAILABLE;
        default:
            return -EIO;
        }
    }
    /* Anything below SFTP (socket, timeout, channel, protocol) leaves the session unusable. */
    c->broken = true;
    return BACKEND_E_UNAVAILABLE;
}
