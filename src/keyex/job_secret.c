/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The job secret: 32 random bytes shared by every process of a job, read
 * from a file only its owner can read (like ssh private keys, and for the
 * same reason: anyone who reads it can impersonate the job's processes).
 */
#ifdef HAVE_CONFIG_H
#include "ucx_crypt_config.h"
#endif

#include "keyex.h"

#include <openssl/crypto.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEYEX_KEYGEN_HINT "create one with 'ucx-crypt-keygen FILE' and set UCX_CRYPT_KEY_FILE=FILE"

keyex_status_t keyex_job_secret_load(const char *path,
                                     uint8_t secret[KEYEX_JOB_SECRET_LEN],
                                     char *error, size_t error_len)
{
    uint8_t extra;
    struct stat st;
    ssize_t nread;
    size_t done;
    int fd;

    if ((path == NULL) || (path[0] == '\0')) {
        snprintf(error, error_len, "no key file given; " KEYEX_KEYGEN_HINT);
        return KEYEX_ERR_NO_FILE;
    }

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(error, error_len, "cannot open key file '%s': %s; "
                 KEYEX_KEYGEN_HINT, path, strerror(errno));
        return KEYEX_ERR_NO_FILE;
    }

    /* fstat on the open descriptor: checks and read see the same file */
    if (fstat(fd, &st) != 0) {
        snprintf(error, error_len, "cannot stat key file '%s': %s", path,
                 strerror(errno));
        close(fd);
        return KEYEX_ERR_NO_FILE;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(error, error_len, "key file '%s' is not a regular file; "
                 KEYEX_KEYGEN_HINT, path);
        close(fd);
        return KEYEX_ERR_FORMAT;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        snprintf(error, error_len, "key file '%s' is accessible by group or "
                 "others (mode %04o); restrict it with 'chmod 600 %s'", path,
                 (unsigned)(st.st_mode & 07777), path);
        close(fd);
        return KEYEX_ERR_PERMISSIONS;
    }
    if (st.st_uid != geteuid()) {
        snprintf(error, error_len, "key file '%s' belongs to uid %u, not to "
                 "this process (uid %u); give each user their own key file",
                 path, (unsigned)st.st_uid, (unsigned)geteuid());
        close(fd);
        return KEYEX_ERR_PERMISSIONS;
    }
    if (st.st_size != KEYEX_JOB_SECRET_LEN) {
        snprintf(error, error_len, "key file '%s' holds %lld bytes, expected "
                 "exactly %d raw bytes; " KEYEX_KEYGEN_HINT, path,
                 (long long)st.st_size, KEYEX_JOB_SECRET_LEN);
        close(fd);
        return KEYEX_ERR_FORMAT;
    }

    for (done = 0; done < KEYEX_JOB_SECRET_LEN; done += (size_t)nread) {
        nread = read(fd, secret + done, KEYEX_JOB_SECRET_LEN - done);
        if (nread <= 0) {
            if ((nread < 0) && (errno == EINTR)) {
                nread = 0;
                continue;
            }
            break;
        }
    }
    /* the file must not have grown between fstat and read */
    if ((done != KEYEX_JOB_SECRET_LEN) || (read(fd, &extra, 1) != 0)) {
        OPENSSL_cleanse(secret, KEYEX_JOB_SECRET_LEN);
        snprintf(error, error_len, "key file '%s' changed while being read, "
                 "or is not %d bytes long; " KEYEX_KEYGEN_HINT, path,
                 KEYEX_JOB_SECRET_LEN);
        close(fd);
        return KEYEX_ERR_FORMAT;
    }
    close(fd);
    return KEYEX_OK;
}

keyex_status_t keyex_job_secret_generate(const char *path, char *error,
                                         size_t error_len)
{
    uint8_t *secret;
    keyex_status_t status = KEYEX_OK;
    ssize_t written;
    int fd;

    secret = keyex_secure_alloc(KEYEX_JOB_SECRET_LEN);
    if (secret == NULL) {
        snprintf(error, error_len, "out of memory");
        return KEYEX_ERR_NO_MEMORY;
    }

    /* OpenSSL's private DRBG, seeded from the kernel (getrandom); NIST SP
     * 800-90A CTR_DRBG (crypt_random_secret) */
    if (!crypt_random_secret(secret, KEYEX_JOB_SECRET_LEN)) {
        snprintf(error, error_len, "the random generator failed");
        status = KEYEX_ERR_CRYPTO;
        goto out;
    }

    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, S_IRUSR | S_IWUSR);
    if (fd < 0) {
        snprintf(error, error_len, "cannot create key file '%s': %s%s", path,
                 strerror(errno), (errno == EEXIST) ?
                 " (remove it first to replace it; every process of the job "
                 "must then use the new file)" : "");
        status = (errno == EEXIST) ? KEYEX_ERR_EXISTS : KEYEX_ERR_NO_FILE;
        goto out;
    }
    /* O_CREAT honours the umask; make the mode exact whatever it is */
    if (fchmod(fd, S_IRUSR | S_IWUSR) != 0) {
        snprintf(error, error_len, "cannot chmod '%s': %s", path, strerror(errno));
        status = KEYEX_ERR_PERMISSIONS;
    } else {
        written = write(fd, secret, KEYEX_JOB_SECRET_LEN);
        if ((written != KEYEX_JOB_SECRET_LEN) || (fsync(fd) != 0)) {
            snprintf(error, error_len, "cannot write key file '%s': %s", path,
                     strerror(errno));
            status = KEYEX_ERR_NO_FILE;
        }
    }
    close(fd);
    if (status != KEYEX_OK) {
        unlink(path);
    }
out:
    keyex_secure_free(secret, KEYEX_JOB_SECRET_LEN);
    return status;
}
