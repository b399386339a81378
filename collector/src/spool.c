/* The write-ahead spool: every accepted chunk is appended here before the agent gets its ack,
 * and the producer reads records back in order to send them to Kafka.
 *
 * Layout: <spool-dir>/<16 hex id>.seg, ids increasing. A segment starts with a 16-byte header
 * ("FPSPOOL1", u64 LE id) followed by records:
 *
 *   u32 magic "FPSR" | u32 body_len | u64 XXH3 of bytes 16..32 and the body | u64 received_ns
 *   | u16 key_len | u16 hdr_len | u32 frame_len | key | headers | frame          (LE throughout)
 *
 * headers = (u8 name_len, name, u8 value_len, value)*. One writev per record: after a process
 * kill every acked record is whole in the page cache; after a machine crash a torn tail is
 * detected (magic/length/checksum) and the rest of that segment is skipped and counted.
 * The last segment is the only one written; older ones are sealed. A segment is deleted when
 * all its records are delivered (col_spool_commit) or, oldest first, when the total would pass
 * spool-max (its unread records are counted as dropped). <spool-dir>/commit holds the delivered
 * position (written at most once per fsync-interval tick and at close) so a restart replays
 * only what was not delivered, give or take the last second.
 *
 * Per peer uid, the bytes each uid's records take in the segments: kept per segment
 * and in all, released with the segment, rebuilt from the fp-peer-uid headers at start. The
 * ingest side reads them to keep one local user from pushing out everyone else's chunks.
 *
 * Threading: loop thread only. fdatasync with spool-fsync=interval runs on libuv's thread
 * pool on a dup'ed descriptor, so the loop never waits for the disk. */
#include "internal.h"

#include "cm/error.h"
#include "cm/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#define SEG_MAGIC "FPSPOOL1"
#define SEG_HDR 16u
#define REC_MAGIC 0x52535046u /* "FPSR" little endian */
#define REC_HDR 32u
#define MAX_HDR_BLOB (COL_MAX_HDRS * (2 + 255 + 160))

/* Bytes held per owner, a col_budget_key of (peer uid, container): a list as long as the
 * budgets ingest keeps (at most 4096 and the shared one). */
typedef struct {
    uint64_t uid; /* the owner key */
    uint64_t bytes;
} uid_bytes_t;

typedef struct {
    uid_bytes_t *v;
    size_t n, cap;
} uid_list_t;

typedef struct {
    uint64_t id;
    int fd;           /* read descriptor */
    uid_list_t uids;  /* bytes of its records per peer uid */
    uint64_t size;    /* bytes of whole records (plus header) */
    uint32_t records;
    int sealed;
} seg_t;

struct col_spool {
    uv_loop_t *loop;
    const col_config_t *cfg;
    int dirfd;
    seg_t *segs; /* ascending ids; the last one is being written */
    size_t n, cap;
    int wfd;     /* write descriptor of segs[n - 1] */
    uint64_t total;
    uid_list_t uids;    /* bytes per peer uid, all segments */
    col_spool_pos_t rd; /* read cursor */
    uint64_t unread;    /* records after the read cursor */
    col_spool_pos_t committed;
    int commit_dirty, sync_dirty, sync_busy;
    uv_fs_t sync_req;
    uv_timer_t timer;
};

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Adds delta (may be negative) to uid's entry; an entry reaching 0 is removed. Returns -1
 * when a list cannot grow (ENOMEM: the bytes are not counted for the uid), else 0. */
static int uid_add(uid_list_t *l, uint64_t uid, int64_t delta) {
    size_t i = 0;
    while (i < l->n && l->v[i].uid != uid)
        i++;
    if (i == l->n) {
        if (delta <= 0)
            return 0;
        if (l->n == l->cap) {
            size_t nc = l->cap ? l->cap * 2 : 4;
            uid_bytes_t *nv = realloc(l->v, nc * sizeof *nv);
            if (!nv)
                return -1;
            l->v = nv;
            l->cap = nc;
        }
        l->v[l->n++] = (uid_bytes_t){uid, 0};
    }
    if (delta < 0 && (uint64_t)-delta >= l->v[i].bytes)
        l->v[i] = l->v[--l->n];
    else
        l->v[i].bytes += (uint64_t)delta;
    return 0;
}

uint64_t col_spool_uid_bytes(const col_spool_t *s, uint64_t uid, uint64_t *uids) {
    uint64_t b = 0;
    for (size_t i = 0; i < s->uids.n; i++)
        if (s->uids.v[i].uid == uid)
            b = s->uids.v[i].bytes;
    if (uids)
        *uids = s->uids.n;
    return b;
}

uint64_t col_spool_total(const col_spool_t *s) { return s->total; }

static void update_gauges(col_spool_t *s) {
    col_gauge_set(&col_metrics.spool_bytes, s->total);
    col_gauge_set(&col_metrics.spool_segments, s->n);
}

static seg_t *seg_find(const col_spool_t *s, uint64_t id, size_t *idx) {
    for (size_t i = 0; i < s->n; i++)
        if (s->segs[i].id == id) {
            if (idx)
                *idx = i;
            return &s->segs[i];
        }
    return NULL;
}

int col_spool_segment_exists(const col_spool_t *s, uint64_t seg_id) {
    return seg_find(s, seg_id, NULL) != NULL;
}

static void seg_path(const col_spool_t *s, uint64_t id, char *out, size_t size) {
    snprintf(out, size, "%s/%016" PRIx64 ".seg", s->cfg->spool_dir, id);
}

/* Deletes segs[i] (never the one being written). */
static void seg_delete(col_spool_t *s, size_t i) {
    char path[4200];
    seg_path(s, s->segs[i].id, path, sizeof path);
    if (unlink(path) && errno != ENOENT)
        CM_WARN("msg=\"cannot delete spool segment\" path=%s err=\"%s\"", path, strerror(errno));
    close(s->segs[i].fd);
    s->total -= s->segs[i].size;
    for (size_t k = 0; k < s->segs[i].uids.n; k++)
        uid_add(&s->uids, s->segs[i].uids.v[k].uid, -(int64_t)s->segs[i].uids.v[k].bytes);
    free(s->segs[i].uids.v);
    memmove(&s->segs[i], &s->segs[i + 1], (s->n - i - 1) * sizeof *s->segs);
    s->n--;
    update_gauges(s);
}

static int seg_push(col_spool_t *s, seg_t seg) {
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 16;
        seg_t *ns = realloc(s->segs, nc * sizeof *ns);
        if (!ns)
            return -ENOMEM;
        s->segs = ns;
        s->cap = nc;
    }
    s->segs[s->n++] = seg;
    s->total += seg.size;
    update_gauges(s);
    return 0;
}

/* Starts a new segment after the last one; seals the previous one. */
static int seg_roll(col_spool_t *s) {
    uint64_t id = s->n ? s->segs[s->n - 1].id + 1 : 1;
    char path[4200];
    seg_path(s, id, path, sizeof path);
    int wfd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600);
    if (wfd < 0)
        return -errno;
    uint8_t hdr[SEG_HDR];
    memcpy(hdr, SEG_MAGIC, 8);
    put64(hdr + 8, id);
    int rfd = -1;
    if (write(wfd, hdr, SEG_HDR) != SEG_HDR || (rfd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        int err = errno ? -errno : -EIO;
        close(wfd);
        unlink(path);
        return err;
    }
    if (s->cfg->fsync_mode != COL_FSYNC_NONE)
        fsync(s->dirfd); /* the new name survives a crash */
    seg_t seg = {.id = id, .fd = rfd, .size = SEG_HDR, .records = 0, .sealed = 0};
    int rc = seg_push(s, seg);
    if (rc) {
        close(wfd);
        close(rfd);
        unlink(path);
        return rc;
    }
    if (s->n > 1)
        s->segs[s->n - 2].sealed = 1;
    if (s->wfd >= 0)
        close(s->wfd);
    s->wfd = wfd;
    return 0;
}

/* The owner of a record from its header blob: col_budget_key of its fp-peer-uid (-1 when
 * absent or bad) and fp-container headers, as ingest keyed it. */
static uint64_t blob_owner(const uint8_t *h, size_t len) {
    static const char uid_name[] = "fp-peer-uid", cid_name[] = "fp-container";
    const uint8_t *end = h + len;
    int uid = -1;
    char cid[161] = "";
    while (h < end) {
        uint8_t nl = *h++;
        if (h + nl + 1 > end)
            break;
        int is_uid = nl == sizeof uid_name - 1 && !memcmp(h, uid_name, nl);
        int is_cid = nl == sizeof cid_name - 1 && !memcmp(h, cid_name, nl);
        h += nl;
        uint8_t vl = *h++;
        if (h + vl > end)
            break;
        if (is_uid && vl > 0 && vl < 16) {
            char v[16], *e;
            memcpy(v, h, vl);
            v[vl] = 0;
            long u = strtol(v, &e, 10);
            uid = *e || u < 0 || u > INT32_MAX ? -1 : (int)u;
        } else if (is_cid && vl < sizeof cid) {
            memcpy(cid, h, vl);
            cid[vl] = 0;
        }
        h += vl;
    }
    return col_budget_key(uid, cid);
}

/* Scans a segment's record headers: counts whole records and finds where they end, and the
 * bytes per peer uid. */
static void seg_scan(int fd, uint64_t file_size, seg_t *seg, uint64_t max_body) {
    uint64_t off = SEG_HDR;
    uint32_t n = 0;
    uint8_t h[REC_HDR], blob[255 + MAX_HDR_BLOB];
    while (off + REC_HDR <= file_size) {
        if (pread(fd, h, REC_HDR, (off_t)off) != REC_HDR || get32(h) != REC_MAGIC)
            break;
        uint64_t body = get32(h + 4);
        uint32_t key_len = get16(h + 24), hdr_len = get16(h + 26);
        if (body > max_body || body != (uint64_t)key_len + hdr_len + get32(h + 28) ||
            off + REC_HDR + body > file_size || key_len > 255 || hdr_len > MAX_HDR_BLOB)
            break;
        uint64_t uid = col_budget_key(-1, NULL);
        if (pread(fd, blob, key_len + hdr_len, (off_t)(off + REC_HDR)) ==
            (ssize_t)(key_len + hdr_len))
            uid = blob_owner(blob + key_len, hdr_len);
        (void)uid_add(&seg->uids, uid, (int64_t)(REC_HDR + body)); /* ENOMEM: not counted */
        off += REC_HDR + body;
        n++;
    }
    if (off != file_size)
        CM_WARN("msg=\"spool segment has a torn or corrupt tail; ignoring it\" id=%016" PRIx64
                " valid_bytes=%" PRIu64 " file_bytes=%" PRIu64,
                seg->id, off, file_size);
    seg->size = off;
    seg->records = n;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Counts the records of seg before byte offset off (off must be a record boundary);
 * returns -1 if off is not a boundary. */
static int64_t records_before(const seg_t *seg, uint64_t off) {
    uint64_t o = SEG_HDR;
    int64_t n = 0;
    uint8_t h[REC_HDR];
    while (o < off) {
        if (pread(seg->fd, h, REC_HDR, (off_t)o) != REC_HDR)
            return -1;
        o += REC_HDR + get32(h + 4);
        n++;
    }
    return o == off ? n : -1;
}

static int recover(col_spool_t *s, char *errbuf, size_t errbuf_size) {
    DIR *d = opendir(s->cfg->spool_dir);
    if (!d) {
        snprintf(errbuf, errbuf_size, "cannot read spool-dir '%s': %s", s->cfg->spool_dir,
                 strerror(errno));
        return -errno;
    }
    uint64_t *ids = NULL;
    size_t nids = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        uint64_t id;
        char tail[8];
        if (strlen(e->d_name) != 20 || sscanf(e->d_name, "%16" SCNx64 "%7s", &id, tail) != 2 ||
            strcmp(tail, ".seg"))
            continue;
        if (nids == cap) {
            cap = cap ? cap * 2 : 64;
            uint64_t *n = realloc(ids, cap * sizeof *n);
            if (!n) {
                free(ids);
                closedir(d);
                return -ENOMEM;
            }
            ids = n;
        }
        ids[nids++] = id;
    }
    closedir(d);
    if (nids)
        qsort(ids, nids, sizeof *ids, cmp_u64);

    /* The delivered position from the last run. */
    col_spool_pos_t commit = {0, 0, 0};
    char path[4200], buf[128];
    snprintf(path, sizeof path, "%s/commit", s->cfg->spool_dir);
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(buf, sizeof buf, f) ||
            sscanf(buf, "%" SCNx64 " %" SCNu64, &commit.seg_id, &commit.offset) != 2)
            commit.seg_id = commit.offset = 0;
        fclose(f);
    }
    uint64_t max_body = (uint64_t)s->cfg->max_msg + 255 + MAX_HDR_BLOB;
    int rc = 0;
    for (size_t i = 0; i < nids; i++) {
        seg_path(s, ids[i], path, sizeof path);
        if (ids[i] < commit.seg_id) { /* delivered before the restart */
            unlink(path);
            continue;
        }
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        uint8_t hdr[SEG_HDR];
        if (fd < 0 || fstat(fd, &st) || pread(fd, hdr, SEG_HDR, 0) != SEG_HDR ||
            memcmp(hdr, SEG_MAGIC, 8) || get64(hdr + 8) != ids[i]) {
            CM_WARN("msg=\"not a spool segment, ignoring it\" path=%s", path);
            if (fd >= 0)
                close(fd);
            continue;
        }
        seg_t seg = {.id = ids[i], .fd = fd, .sealed = 1};
        seg_scan(fd, (uint64_t)st.st_size, &seg, max_body);
        if ((rc = seg_push(s, seg))) {
            close(fd);
            free(seg.uids.v);
            goto out;
        }
        for (size_t k = 0; k < seg.uids.n; k++)
            uid_add(&s->uids, seg.uids.v[k].uid, (int64_t)seg.uids.v[k].bytes);
    }
    /* Read cursor: the commit position if it is valid, else the oldest record. */
    if (s->n) {
        s->rd = (col_spool_pos_t){s->segs[0].id, SEG_HDR, 0};
        seg_t *cs = seg_find(s, commit.seg_id, NULL);
        if (cs && commit.offset <= cs->size) {
            int64_t k = records_before(cs, commit.offset);
            if (k >= 0)
                s->rd = (col_spool_pos_t){cs->id, commit.offset, (uint32_t)k};
        }
        for (size_t i = 0; i < s->n; i++) {
            if (s->segs[i].id == s->rd.seg_id)
                s->unread += s->segs[i].records - s->rd.rec;
            else if (s->segs[i].id > s->rd.seg_id)
                s->unread += s->segs[i].records;
        }
        s->committed = s->rd;
    }
    col_count(&col_metrics.spool_replayed, s->unread);
    if (s->unread)
        CM_INFO("msg=\"replaying undelivered spool records\" records=%" PRIu64
                " segments=%zu bytes=%" PRIu64,
                s->unread, s->n, s->total);
out:
    free(ids);
    return rc;
}

static void sync_done(uv_fs_t *req) {
    col_spool_t *s = req->data;
    if (req->result < 0)
        CM_WARN("msg=\"spool fdatasync failed\" err=\"%s\"", uv_strerror((int)req->result));
    close((int)(intptr_t)req->file);
    uv_fs_req_cleanup(req);
    s->sync_busy = 0;
}

static void write_commit(col_spool_t *s) {
    if (!s->commit_dirty)
        return;
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/commit", s->cfg->spool_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    fprintf(f, "%016" PRIx64 " %" PRIu64 "\n", s->committed.seg_id, s->committed.offset);
    if (fclose(f) == 0 && rename(tmp, path) == 0)
        s->commit_dirty = 0;
}

static void on_tick(uv_timer_t *t) {
    col_spool_t *s = t->data;
    write_commit(s);
    if (s->cfg->fsync_mode == COL_FSYNC_INTERVAL && s->sync_dirty && !s->sync_busy &&
        s->wfd >= 0) {
        int fd = dup(s->wfd);
        if (fd < 0)
            return;
        s->sync_req.data = s;
        if (uv_fs_fdatasync(s->loop, &s->sync_req, fd, sync_done) == 0) {
            s->sync_busy = 1;
            s->sync_dirty = 0;
        } else {
            close(fd);
        }
    }
}

/* Closes the descriptors and frees s (its timer is closed or was never started). */
static void spool_free(col_spool_t *s) {
    for (size_t i = 0; i < s->n; i++) {
        close(s->segs[i].fd);
        free(s->segs[i].uids.v);
    }
    free(s->uids.v);
    if (s->wfd >= 0)
        close(s->wfd);
    if (s->dirfd >= 0)
        close(s->dirfd);
    free(s->segs);
    free(s);
}

int col_spool_open(uv_loop_t *loop, const col_config_t *cfg, col_spool_t **out, char *errbuf,
                   size_t errbuf_size) {
    int rc = 0;
    col_spool_t *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->loop = loop;
    s->cfg = cfg;
    s->wfd = -1;
    s->dirfd = -1;
    if (mkdir(cfg->spool_dir, 0700) && errno != EEXIST) {
        rc = -errno;
        snprintf(errbuf, errbuf_size, "cannot create spool-dir '%s': %s", cfg->spool_dir,
                 strerror(errno));
        goto out;
    }
    if ((s->dirfd = open(cfg->spool_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        rc = -errno;
        snprintf(errbuf, errbuf_size, "cannot open spool-dir '%s': %s", cfg->spool_dir,
                 strerror(errno));
        goto out;
    }
    if ((rc = recover(s, errbuf, errbuf_size)))
        goto out;
    if ((rc = seg_roll(s))) {
        snprintf(errbuf, errbuf_size, "cannot create a segment in spool-dir '%s': %s",
                 cfg->spool_dir, strerror(-rc));
        goto out;
    }
    if (s->n == 1) /* empty spool: read from the new segment */
        s->committed = s->rd = (col_spool_pos_t){s->segs[0].id, SEG_HDR, 0};
    uv_timer_init(loop, &s->timer);
    s->timer.data = s;
    uint64_t ms = (uint64_t)(cfg->fsync_interval / 1000000);
    uv_timer_start(&s->timer, on_tick, ms, ms);
    uv_unref((uv_handle_t *)&s->timer);
out:
    if (rc) {
        spool_free(s);
        s = NULL;
    }
    *out = s;
    return rc;
}

/* Deletes the oldest segment to make room; counts its unread records as dropped. */
static void drop_oldest(col_spool_t *s) {
    seg_t *old = &s->segs[0];
    uint64_t lost = 0;
    if (s->rd.seg_id == old->id) {
        lost = old->records - s->rd.rec;
        s->rd = (col_spool_pos_t){s->segs[1].id, SEG_HDR, 0};
    } else if (s->rd.seg_id < old->id) {
        lost = old->records;
    }
    s->unread -= lost;
    col_count(&col_metrics.dropped[COL_DROP_SPOOL_FULL], lost);
    CM_WARN("msg=\"spool full: deleted the oldest segment\" id=%016" PRIx64
            " undelivered_records=%" PRIu64 " spool_max=%lld",
            old->id, lost, (long long)s->cfg->spool_max);
    seg_delete(s, 0);
}

uint64_t col_spool_record_size(const char *key, const col_hdrs_t *hdrs, size_t frame_len) {
    uint64_t n = REC_HDR + strnlen(key, 255) + frame_len;
    for (int i = 0; i < hdrs->n; i++)
        n += 2 + strnlen(hdrs->name[i], 255) + strnlen(hdrs->value[i], 159);
    return n;
}

int col_spool_append(col_spool_t *s, uint64_t uid, const char *key, const col_hdrs_t *hdrs,
                     uint64_t received_ns, const uint8_t *frame, size_t frame_len) {
    uint8_t head[REC_HDR + 255 + MAX_HDR_BLOB];
    size_t key_len = strnlen(key, 255);
    uint8_t *p = head + REC_HDR;
    memcpy(p, key, key_len);
    p += key_len;
    for (int i = 0; i < hdrs->n; i++) {
        size_t nl = strnlen(hdrs->name[i], 255), vl = strnlen(hdrs->value[i], 159);
        *p++ = (uint8_t)nl;
        memcpy(p, hdrs->name[i], nl), p += nl;
        *p++ = (uint8_t)vl;
        memcpy(p, hdrs->value[i], vl), p += vl;
    }
    size_t hdr_len = (size_t)(p - head) - REC_HDR - key_len;
    uint64_t body = key_len + hdr_len + frame_len;
    uint64_t need = REC_HDR + body;
    if (need + SEG_HDR > (uint64_t)s->cfg->spool_max / 2)
        return -EFBIG;
    while (s->total + need > (uint64_t)s->cfg->spool_max && s->n > 1)
        drop_oldest(s);
    put32(head, REC_MAGIC);
    put32(head + 4, (uint32_t)body);
    put64(head + 16, received_ns);
    put16(head + 24, (uint16_t)key_len);
    put16(head + 26, (uint16_t)hdr_len);
    put32(head + 28, (uint32_t)frame_len);
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, head + 16, (size_t)(p - head) - 16);
    XXH3_64bits_update(&st, frame, frame_len);
    put64(head + 8, XXH3_64bits_digest(&st));

    seg_t *w = &s->segs[s->n - 1];
    struct iovec iov[2] = {{head, (size_t)(p - head)}, {(void *)frame, frame_len}};
    size_t done = 0;
    while (done < need) {
        struct iovec v[2];
        int nv = 0;
        size_t skip = done;
        for (int i = 0; i < 2; i++) {
            if (skip >= iov[i].iov_len) {
                skip -= iov[i].iov_len;
                continue;
            }
            v[nv].iov_base = (uint8_t *)iov[i].iov_base + skip;
            v[nv++].iov_len = iov[i].iov_len - skip;
            skip = 0;
        }
        ssize_t r = writev(s->wfd, v, nv);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int err = r < 0 ? -errno : -EIO;
            /* Cut the partial record so the segment stays a list of whole records. */
            if (ftruncate(s->wfd, (off_t)w->size)) {
                w->sealed = 1; /* keep the valid prefix; write a new segment next time */
                seg_roll(s);
            }
            return err;
        }
        done += (size_t)r;
    }
    if (s->cfg->fsync_mode == COL_FSYNC_ALWAYS && fdatasync(s->wfd))
        CM_WARN("msg=\"spool fdatasync failed\" err=\"%s\"", strerror(errno));
    w->size += need;
    w->records++;
    if (uid_add(&w->uids, uid, (int64_t)need) == 0)
        uid_add(&s->uids, uid, (int64_t)need);
    s->total += need;
    s->unread++;
    s->sync_dirty = 1;
    if (w->size >= (uint64_t)s->cfg->segment_size) {
        int rc = seg_roll(s);
        if (rc)
            CM_WARN("msg=\"cannot start a new spool segment, writing on\" err=\"%s\"",
                    strerror(-rc));
    }
    update_gauges(s);
    return 0;
}

/* Lengths of a record's parts, as its header gives them. */
typedef struct {
    uint32_t key, hdrs, frame;
} rec_lens_t;

/* Reads the record at off of seg into head (its header, key and header blob) and *frame
 * (malloc'd), checking the bounds recovery applies (seg_scan: the file may have changed since)
 * and the checksum. Returns 1, 0 when the record is corrupt, or -ENOMEM. */
static int record_load(const col_spool_t *s, const seg_t *seg, uint64_t off, uint8_t *head,
                       rec_lens_t *l, uint8_t **frame) {
    *frame = NULL;
    if (pread(seg->fd, head, REC_HDR, (off_t)off) != REC_HDR || get32(head) != REC_MAGIC)
        return 0;
    l->key = get16(head + 24), l->hdrs = get16(head + 26), l->frame = get32(head + 28);
    uint64_t body = get32(head + 4);
    if (l->key > 255 || l->hdrs > MAX_HDR_BLOB || l->frame > (uint64_t)s->cfg->max_msg ||
        body != (uint64_t)l->key + l->hdrs + l->frame || off + REC_HDR + body > seg->size ||
        pread(seg->fd, head + REC_HDR, l->key + l->hdrs, (off_t)(off + REC_HDR)) !=
            (ssize_t)(l->key + l->hdrs))
        return 0;
    uint8_t *f = malloc(l->frame ? l->frame : 1);
    if (!f)
        return -ENOMEM;
    XXH3_state_t st;
    if (pread(seg->fd, f, l->frame, (off_t)(off + REC_HDR + l->key + l->hdrs)) !=
        (ssize_t)l->frame)
        goto bad;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, head + 16, REC_HDR - 16 + l->key + l->hdrs);
    XXH3_64bits_update(&st, f, l->frame);
    if (XXH3_64bits_digest(&st) != get64(head + 8))
        goto bad;
    *frame = f;
    return 1;
bad:
    free(f);
    return 0;
}

/* Drops the rest of segment i from the corrupt record at off on (counted, logged); a new
 * segment is started when it was the writer's. Returns 0 or seg_roll's error. */
static int segment_cut(col_spool_t *s, size_t i, uint64_t off) {
    seg_t *seg = &s->segs[i];
    uint64_t lost = seg->records - s->rd.rec;
    CM_ERROR("msg=\"corrupt spool record: skipping the rest of the segment\" "
             "id=%016" PRIx64 " offset=%" PRIu64 " records_lost=%" PRIu64,
             seg->id, off, lost);
    col_count(&col_metrics.dropped[COL_DROP_SPOOL_CORRUPT], lost);
    s->unread -= lost;
    seg->records = s->rd.rec;
    s->total -= seg->size - off;
    seg->size = off;
    seg->sealed = 1;
    if (i + 1 >= s->n) /* the writer's own segment: start a new one */
        return seg_roll(s);
    return 0;
}

/* The known headers of a record's header blob h (len bytes) into hdrs; others are skipped. */
static void record_headers(const uint8_t *h, size_t len, col_hdrs_t *hdrs) {
    /* Header names are the constants of cm/wire.h; keep a pointer to a static copy. */
    static const char *known[] = {"fp-host",     "fp-collector", "fp-node",
                                  "fp-pod",      "fp-container", "fp-peer-pid",
                                  "fp-peer-uid", "fp-peer-nspid"};
    const uint8_t *end = h + len;
    while (h < end && hdrs->n < COL_MAX_HDRS) {
        uint8_t nl = *h++;
        if (h + nl + 1 > end)
            break;
        const char *name = NULL;
        for (size_t k = 0; k < sizeof known / sizeof *known; k++)
            if (strlen(known[k]) == nl && !memcmp(known[k], h, nl))
                name = known[k];
        h += nl;
        uint8_t vl = *h++;
        if (h + vl > end)
            break;
        if (name) {
            hdrs->name[hdrs->n] = name;
            memcpy(hdrs->value[hdrs->n], h, vl);
            hdrs->value[hdrs->n][vl] = 0;
            hdrs->n++;
        }
        h += vl;
    }
}

int col_spool_read(col_spool_t *s, col_record_t *rec) {
    for (;;) {
        size_t i;
        seg_t *seg = seg_find(s, s->rd.seg_id, &i);
        if (!seg) { /* deleted under the cursor: move to the oldest segment */
            if (!s->n)
                return 0;
            s->rd = (col_spool_pos_t){s->segs[0].id, SEG_HDR, 0};
            continue;
        }
        if (s->rd.offset >= seg->size) {
            if (i + 1 >= s->n || !seg->sealed)
                return 0;
            s->rd = (col_spool_pos_t){s->segs[i + 1].id, SEG_HDR, 0};
            continue;
        }
        uint8_t head[REC_HDR + 255 + MAX_HDR_BLOB];
        uint64_t off = s->rd.offset;
        rec_lens_t l = {0};
        uint8_t *frame;
        int ok = record_load(s, seg, off, head, &l, &frame);
        if (ok < 0)
            return ok;
        if (!ok) {
            int rc = segment_cut(s, i, off);
            if (rc)
                return rc;
            continue;
        }
        memset(rec, 0, sizeof *rec);
        rec->pos = s->rd;
        rec->next_offset = off + REC_HDR + l.key + l.hdrs + l.frame;
        rec->received_ns = get64(head + 16);
        memcpy(rec->key, head + REC_HDR, l.key);
        rec->key[l.key] = 0;
        record_headers(head + REC_HDR + l.key, l.hdrs, &rec->hdrs);
        rec->frame = frame;
        rec->frame_len = l.frame;
        s->rd.offset = rec->next_offset;
        s->rd.rec++;
        s->unread--;
        return 1;
    }
}

col_spool_pos_t col_spool_tell(const col_spool_t *s) { return s->rd; }
uint64_t col_spool_unread(const col_spool_t *s) { return s->unread; }

void col_spool_commit(col_spool_t *s, col_spool_pos_t pos) {
    if (pos.seg_id != s->committed.seg_id || pos.offset != s->committed.offset)
        s->commit_dirty = 1;
    s->committed = pos;
    while (s->n > 1) {
        seg_t *old = &s->segs[0];
        if (old->id < pos.seg_id || (old->id == pos.seg_id && old->sealed &&
                                     pos.offset >= old->size && s->rd.seg_id != old->id))
            seg_delete(s, 0);
        else
            break;
    }
}

void col_spool_rewind(col_spool_t *s, col_spool_pos_t pos, uint64_t records) {
    if (seg_find(s, pos.seg_id, NULL))
        s->rd = pos;
    else if (s->n)
        s->rd = (col_spool_pos_t){s->segs[0].id, SEG_HDR, 0};
    s->unread += records;
}

void col_spool_close(col_spool_t *s) {
    if (!s)
        return;
    s->commit_dirty = 1;
    write_commit(s);
    if (s->wfd >= 0 && s->cfg->fsync_mode != COL_FSYNC_NONE)
        fdatasync(s->wfd);
    uv_close((uv_handle_t *)&s->timer, NULL);
    /* A pending thread-pool fdatasync owns a dup'ed fd and s: run the loop until it ends. */
    while (s->sync_busy)
        uv_run(s->loop, UV_RUN_ONCE);
    uv_run(s->loop, UV_RUN_NOWAIT);
    spool_free(s);
}
