/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The bulk engine at the UCT level (uct/crypt_test.h): encrypted put and
 * get of every size class, pipelined and naive, over a UCX inner with puts
 * and over crypt's own wire (segments as frames); flush and fence; memory
 * outside registration refused; tampering detected and never completed.
 */
#include "uct/crypt_test.h"


/* ---- the bulk engine: encrypted put_zcopy ---------------------------------- */


class uct_crypt_bulk_test : public uct_crypt_test {
protected:
    uct_crypt_bulk_test() { base_settings = {ucx_inner}; }

    struct region {
        std::vector<uint8_t> buffer;
        uct_mem_h            memh = UCT_MEM_HANDLE_NULL;
        uct_md_h             md   = nullptr;
        ~region() { if (memh != UCT_MEM_HANDLE_NULL) uct_md_mem_dereg(md, memh); }
    };

    void reg(side &s, region &r, size_t len, unsigned access = UCT_MD_MEM_ACCESS_ALL)
    {
        r.buffer.assign(len + 64, 0);
        r.md = s.md;
        ASSERT_EQ(uct_md_mem_reg(s.md, r.buffer.data(), r.buffer.size(),
                                 access, &r.memh), UCS_OK);
    }

    /* the target's key, as UCP ships it: packed at b, unpacked at a */
    uct_rkey_bundle_t rkey_of(side &s, region &r)
    {
        uct_md_attr_t attr;
        EXPECT_EQ(uct_md_query(s.md, &attr), UCS_OK);
        EXPECT_TRUE(attr.cap.flags & UCT_MD_FLAG_NEED_RKEY);
        std::vector<uint8_t> packed(attr.rkey_packed_size);
        EXPECT_EQ(uct_md_mkey_pack(s.md, r.memh, packed.data()), UCS_OK);
        uct_rkey_bundle_t bundle = {};
        EXPECT_EQ(uct_rkey_unpack(component, packed.data(), &bundle), UCS_OK);
        return bundle;
    }

    struct put_op;
    struct put_completion {
        uct_completion_t super;
        int              done   = 0;
        ucs_status_t     status = UCS_OK;
        put_op           *op    = nullptr;
    };

    struct put_op {
        put_completion       comp;
        region               src, dst;
        uct_rkey_bundle_t    rkey = {};
        size_t               len  = 0;
        uint64_t             seq  = 0;
        /* what the target held when UCT reported completion */
        std::vector<uint8_t> at_completion;
        bool                 checked_at_completion = false;
    };

    static void put_done(uct_completion_t *self)
    {
        put_completion *c = ucs_container_of(self, put_completion, super);
        put_op *op        = c->op;
        c->done   = 1;
        c->status = self->status;
        op->at_completion.assign(op->dst.buffer.begin(), op->dst.buffer.begin() + op->len);
        op->checked_at_completion = true;
    }

    /* puts live until the endpoints are gone: a cancelled put still
     * completes (with an error) when its endpoint is destroyed */
    std::vector<std::unique_ptr<put_op>> ops;

    put_op &new_op()
    {
        ops.emplace_back(new put_op);
        return *ops.back();
    }

    /* endpoints, keys, registrations, ifaces and mds gone; the worker stays */
    void close_pair()
    {
        destroy_eps();
        for (auto &op : ops) {
            if (op->rkey.handle != nullptr || op->rkey.rkey != 0) {
                uct_rkey_release(component, &op->rkey);
            }
        }
        ops.clear(); /* deregisters while the mds are open */
        close_side(a);
        close_side(b);
    }

    void TearDown() override
    {
        close_pair();
        uct_crypt_test::TearDown();
    }

    /* registers both buffers, fills the source, arms the completion;
     * returns the iov of `local` (the source of a put, the destination of
     * a get) */
    uct_iov_t prepare(put_op &op, side &src_side, side &dst_side, size_t len,
                      uint64_t seq, bool local_is_src)
    {
        op.len = len;
        op.seq = seq;
        reg(src_side, op.src, len);
        reg(dst_side, op.dst, len);
        auto payload = make_payload(seq, len);
        std::copy(payload.begin(), payload.end(), op.src.buffer.begin());
        /* the key of the remote buffer */
        op.rkey              = local_is_src ? rkey_of(dst_side, op.dst) :
                                              rkey_of(src_side, op.src);
        op.comp.op           = &op;
        op.comp.super.func   = put_done;
        op.comp.super.count  = 1;
        op.comp.super.status = UCS_OK;
        region &local = local_is_src ? op.src : op.dst;
        uct_iov_t iov = {};
        iov.buffer = local.buffer.data();
        iov.length = len;
        iov.memh   = local.memh;
        iov.count  = 1;
        return iov;
    }

    void post_put(uct_ep_h ep, side &from, side &to, put_op &op, size_t len, uint64_t seq)
    {
        uct_iov_t iov = prepare(op, from, to, len, seq, true);
        ucs_status_t status;
        /* NO_RESOURCE while crypt's own connection comes up: the UCT contract */
        send_retrying([&] {
            return status = uct_ep_put_zcopy(ep, &iov, 1, (uint64_t)op.dst.buffer.data(),
                                             op.rkey.rkey, &op.comp.super);
        });
        ASSERT_TRUE((status == UCS_OK) || (status == UCS_INPROGRESS))
                << ucs_status_string(status);
        if (status == UCS_OK) {
            put_done(&op.comp.super);
        }
    }

    /* get: `from` reads `to`'s src region into its own dst region, i.e.
     * `to` seals and puts it (base/format.h); `extra` bytes of the range
     * lie past the target's registration (0: all inside) */
    void post_get(uct_ep_h ep, side &from, side &to, put_op &op, size_t len,
                  uint64_t seq, size_t extra = 0)
    {
        uct_iov_t iov   = prepare(op, to, from, len, seq, false);
        uint64_t remote = (uint64_t)op.src.buffer.data() + extra;
        ucs_status_t status;
        send_retrying([&] {
            return status = uct_ep_get_zcopy(ep, &iov, 1, remote, op.rkey.rkey,
                                             &op.comp.super);
        });
        ASSERT_TRUE((status == UCS_OK) || (status == UCS_INPROGRESS))
                << ucs_status_string(status);
    }

    void check_get_sizes(const settings_t &settings)
    {
        open_pair(settings, settings);
        const size_t seg = 4096;
        std::vector<size_t> sizes = {0, 1, seg - 1, seg, seg + 1, 3 * seg + 7,
                                     10 * seg, (1 << 20) + 3};
        for (size_t i = 0; i < sizes.size(); ++i) {
            post_get(ab, a, b, new_op(), sizes[i], 100 + i);
        }
        progress_until([&] {
            for (auto &op : ops) if (!op->comp.done) return false;
            return true;
        });
        for (auto &op : ops) {
            expect_put_delivered(*op); /* in place, opened, before completion */
        }
        flush(ab);
    }

    /* what UCP's worker flush does (ucp_worker_flush_check): poll
     * uct_iface_flush, with no completion, until it says UCS_OK */
    void iface_flush(side &s)
    {
        ucs_status_t status;
        deadline limit(20);
        while ((((status = uct_iface_flush(s.iface, 0, NULL)) == UCS_INPROGRESS) ||
                (status == UCS_ERR_NO_RESOURCE)) && !limit.passed()) {
            uct_worker_progress(worker);
        }
        ASSERT_EQ(status, UCS_OK);
    }

    /* An MPI_Win_fence is a UCP worker flush: when a's iface says it is
     * flushed, every put and get a posted is complete and in place */
    void check_iface_flush_waits(const settings_t &settings, bool get)
    {
        open_pair(settings, settings);
        std::vector<size_t> sizes = {1, 4096, 256 * 1024};
        for (size_t i = 0; i < sizes.size(); ++i) {
            if (get) {
                post_get(ab, a, b, new_op(), sizes[i], 200 + i);
            } else {
                post_put(ab, a, b, new_op(), sizes[i], 200 + i);
            }
        }
        iface_flush(a);
        for (auto &op : ops) {
            EXPECT_TRUE(op->comp.done) << "the iface flushed before the "
                                       << (get ? "get" : "put") << " of "
                                       << op->len << " bytes completed";
        }
        for (auto &op : ops) {
            expect_put_delivered(*op);
        }
    }

    /* UCP's fenced rendezvous (rndv_put.c, FENCED_ATP): a request that
     * waited behind a fence is dispatched and posts the next message: its
     * put, a fence, then the AM that tells the target the data is there.
     * That AM must wait for the put too. */
    struct fenced_next_message {
        uct_pending_req_t     super;
        uct_ep_h              ep;
        uct_iov_t             iov;
        uint64_t              remote;
        uct_rkey_t            rkey;
        uct_completion_t      *comp;
        std::vector<uint8_t>  *payload;
        ucs_status_t          put_status = UCS_ERR_LAST, am_status = UCS_ERR_LAST;
        pending_sender        later;

        static ucs_status_t run(uct_pending_req_t *self)
        {
            fenced_next_message *n = ucs_container_of(self, fenced_next_message, super);
            n->put_status = uct_ep_put_zcopy(n->ep, &n->iov, 1, n->remote, n->rkey,
                                             n->comp);
            EXPECT_EQ(uct_ep_fence(n->ep, 0), UCS_OK);
            n->am_status = uct_ep_am_short(n->ep, kAmId, 8, n->payload->data(), 32);
            if (n->am_status == UCS_ERR_NO_RESOURCE) {
                n->later.init(n->ep, n->payload, 8);
                EXPECT_EQ(uct_ep_pending_add(n->ep, &n->later.super, 0), UCS_OK);
            }
            return UCS_OK;
        }
    };

    void check_a_fence_posted_from_behind_a_fence()
    {
        settings_t settings = {{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "1"}};
        open_pair(settings, settings);
        put_op &first = new_op(), &second = new_op();
        post_put(ab, a, b, first, 1 << 20, 11);
        ASSERT_EQ(uct_ep_fence(ab, 0), UCS_OK);

        auto payload = make_payload(8, 32);
        fenced_next_message next;
        next.super.func = fenced_next_message::run;
        next.ep         = ab;
        next.iov        = prepare(second, a, b, 1 << 20, 12, true);
        next.remote     = (uint64_t)second.dst.buffer.data();
        next.rkey       = second.rkey.rkey;
        next.comp       = &second.comp.super;
        next.payload    = &payload;
        std::vector<uint8_t> seen; /* the second put's target at the AM */
        b.on_am = [&] {
            seen.assign(second.dst.buffer.begin(), second.dst.buffer.begin() + second.len);
        };
        ASSERT_EQ(uct_ep_am_short(ab, kAmId, 8, payload.data(), 32), UCS_ERR_NO_RESOURCE);
        ASSERT_EQ(uct_ep_pending_add(ab, &next.super, 0), UCS_OK);

        progress_until([&] { return next.put_status != UCS_ERR_LAST; });
        ASSERT_EQ(next.put_status, UCS_INPROGRESS);
        EXPECT_EQ(next.am_status, UCS_ERR_NO_RESOURCE)
                << "an AM went out ahead of a put before its own fence";
        progress_until([&] {
            return (b.received.size() == 1u) && first.comp.done && second.comp.done;
        });
        expect_message(b.received[0], 8, 32);
        EXPECT_EQ(seen, make_payload(second.seq, second.len))
                << "the AM was delivered before the put was in place";
        expect_put_delivered(first);
        expect_put_delivered(second);
    }

    void expect_put_delivered(put_op &op)
    {
        ASSERT_TRUE(op.comp.done);
        ASSERT_EQ(op.comp.status, UCS_OK);
        auto want = make_payload(op.seq, op.len);
        /* complete only once the target opened everything in place */
        ASSERT_TRUE(op.checked_at_completion);
        ASSERT_EQ(op.at_completion, want) << "put of " << op.len << " bytes";
        for (size_t i = op.len; i < op.dst.buffer.size(); ++i) {
            ASSERT_EQ(op.dst.buffer[i], 0) << "wrote past the end, at " << i;
        }
    }

    /* a put aimed past the target's registration fails the ep there and
     * opens nothing */
    void check_put_outside_registered()
    {
        settings_t settings = {{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "0"}};
        open_pair(settings, settings);
        uint64_t before = failures(UCT_CRYPT_FAIL_MALFORMED);
        /* 64 KiB at the target, of which only the first 8 KiB registered */
        std::vector<uint8_t> area(64 * 1024, 0x5a);
        uct_mem_h memh;
        ASSERT_EQ(uct_md_mem_reg(b.md, area.data(), 8192, UCT_MD_MEM_ACCESS_ALL, &memh), UCS_OK);
        region key_region;
        key_region.md   = b.md;
        key_region.memh = memh; /* deregistered by the region */
        put_op &op = new_op();
        op.rkey = rkey_of(b, key_region);
        reg(a, op.src, 8192);
        auto payload = make_payload(9, 8192);
        std::copy(payload.begin(), payload.end(), op.src.buffer.begin());
        op.len = 8192;
        op.dst.buffer.assign(8192, 0); /* put_done records it at completion */
        op.comp.op = &op;
        op.comp.super.func   = put_done;
        op.comp.super.count  = 1;
        op.comp.super.status = UCS_OK;
        uct_iov_t iov = {};
        iov.buffer = op.src.buffer.data();
        iov.length = 8192;
        iov.memh   = op.src.memh;
        iov.count  = 1;
        ucs_status_t status;
        send_retrying([&] {
            return status = uct_ep_put_zcopy(ab, &iov, 1, (uint64_t)area.data() + 16384,
                                             op.rkey.rkey, &op.comp.super);
        });
        ASSERT_EQ(status, UCS_INPROGRESS);
        progress_until([&] { return !b.failed_eps.empty(); });
        for (int i = 0; i < 10000; ++i) {
            uct_worker_progress(worker);
        }
        EXPECT_EQ(failures(UCT_CRYPT_FAIL_MALFORMED), before + 1);
        EXPECT_FALSE(op.comp.done && (op.comp.status == UCS_OK));
        EXPECT_NE(std::vector<uint8_t>(area.begin() + 16384, area.begin() + 16384 + 8192), payload)
                << "opened outside registered memory";
    }

    /* What a peer handed the remote key of one region at b may reach
     * there: that region only, whatever else b registered (region tokens,
     * base/format.h). Each way of reaching further is refused at b
     * (the flow fails, MALFORMED) and moves no byte. */
    enum reach_t {
        REACH_PUT_INTO_ANOTHER_REGION, /* A's key, B's address */
        REACH_GET_FROM_ANOTHER_REGION, /* A's key, B's address */
        REACH_PUT_WITH_A_GUESSED_KEY,  /* A's address, A's key one bit off */
        REACH_PUT_INTO_A_READ_ONLY_REGION, /* A registered for remote reads */
        REACH_GET_FROM_A_WRITE_ONLY_REGION /* A registered for remote writes */
    };

    void check_reach(reach_t how)
    {
        settings_t settings = {{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "0"}};
        open_pair(settings, settings);
        uint64_t before = failures(UCT_CRYPT_FAIL_MALFORMED);
        put_op &op = new_op();
        region other; /* B: registered at b, its key never handed out */
        reg(b, op.dst, 8192, (how == REACH_PUT_INTO_A_READ_ONLY_REGION) ?
                             (unsigned)UCT_MD_MEM_ACCESS_REMOTE_GET :
                             (how == REACH_GET_FROM_A_WRITE_ONLY_REGION) ?
                             (unsigned)UCT_MD_MEM_ACCESS_REMOTE_PUT :
                             (unsigned)UCT_MD_MEM_ACCESS_ALL);
        reg(b, other, 8192);
        std::fill(other.buffer.begin(), other.buffer.end(), 0x5a);
        reg(a, op.src, 8192);
        auto payload = make_payload(11, 8192);
        std::copy(payload.begin(), payload.end(), op.src.buffer.begin());

        uct_md_attr_t attr;
        ASSERT_EQ(uct_md_query(b.md, &attr), UCS_OK);
        std::vector<uint8_t> packed(attr.rkey_packed_size);
        ASSERT_EQ(uct_md_mkey_pack(b.md, op.dst.memh, packed.data()), UCS_OK);
        if (how == REACH_PUT_WITH_A_GUESSED_KEY) {
            packed[CRYPT_BULK_RKEY_NAME_LEN] ^= 0x01; /* the token's first byte */
        }
        ASSERT_EQ(uct_rkey_unpack(component, packed.data(), &op.rkey), UCS_OK);
        const bool in_a = (how == REACH_PUT_WITH_A_GUESSED_KEY) ||
                          (how == REACH_PUT_INTO_A_READ_ONLY_REGION) ||
                          (how == REACH_GET_FROM_A_WRITE_ONLY_REGION);
        const uint64_t target = in_a ? (uint64_t)op.dst.buffer.data() :
                                       (uint64_t)other.buffer.data();
        const bool get = (how == REACH_GET_FROM_ANOTHER_REGION) ||
                         (how == REACH_GET_FROM_A_WRITE_ONLY_REGION);
        if (how == REACH_GET_FROM_A_WRITE_ONLY_REGION) {
            std::copy(payload.begin(), payload.end(), op.dst.buffer.begin());
        }
        op.len               = 8192;
        op.comp.op           = &op;
        op.comp.super.func   = put_done;
        op.comp.super.count  = 1;
        op.comp.super.status = UCS_OK;
        uct_iov_t iov = {};
        iov.buffer = op.src.buffer.data(); /* a get's destination: zeroed */
        iov.length = 8192;
        iov.memh   = op.src.memh;
        iov.count  = 1;
        ucs_status_t status;
        if (get) {
            std::fill(op.src.buffer.begin(), op.src.buffer.end(), 0);
            send_retrying([&] {
                return status = uct_ep_get_zcopy(ab, &iov, 1, target, op.rkey.rkey,
                                                 &op.comp.super);
            });
        } else {
            send_retrying([&] {
                return status = uct_ep_put_zcopy(ab, &iov, 1, target, op.rkey.rkey,
                                                 &op.comp.super);
            });
        }
        ASSERT_EQ(status, UCS_INPROGRESS);
        progress_until([&] { return !b.failed_eps.empty(); });
        for (int i = 0; i < 10000; ++i) {
            uct_worker_progress(worker);
        }
        EXPECT_EQ(failures(UCT_CRYPT_FAIL_MALFORMED), before + 1);
        EXPECT_FALSE(op.comp.done && (op.comp.status == UCS_OK))
                << "an operation b refused completed successfully";
        /* never opened there. Over a UCX inner the ciphertext itself was
         * put by the inner, whose own key guards where it may write (an
         * HCA refuses an rkey outside its region; the tcp standing in for
         * rc here does not); on crypt's own wire nothing is written */
        std::vector<uint8_t> b_bytes(other.buffer.begin(), other.buffer.begin() + 8192);
        std::vector<uint8_t> a_bytes(op.dst.buffer.begin(), op.dst.buffer.begin() + 8192);
        EXPECT_NE(b_bytes, payload) << "opened in B, whose key was never handed out";
        if (how != REACH_GET_FROM_A_WRITE_ONLY_REGION) { /* (A holds it) */
            EXPECT_NE(a_bytes, payload) << "opened in A under a key it does not have";
        }
        if (base_settings.empty() && (how != REACH_GET_FROM_A_WRITE_ONLY_REGION)) {
            EXPECT_EQ(b_bytes, std::vector<uint8_t>(8192, 0x5a)) << "B was written";
            EXPECT_EQ(a_bytes, std::vector<uint8_t>(8192, 0)) << "A was written";
        }
        if (get) {
            EXPECT_EQ(std::vector<uint8_t>(op.src.buffer.begin(), op.src.buffer.end()),
                      std::vector<uint8_t>(op.src.buffer.size(), 0))
                    << "B's bytes were served for A's key";
        }
    }

    void check_sizes(const settings_t &settings, std::vector<size_t> sizes = {})
    {
        open_pair(settings, settings);
        const size_t seg = 4096;
        if (sizes.empty()) {
            sizes = {0, 1, seg - 1, seg, seg + 1, 2 * seg, 3 * seg + 7,
                     10 * seg, (1 << 20) + 3};
        }
        for (size_t i = 0; i < sizes.size(); ++i) {
            post_put(ab, a, b, new_op(), sizes[i], i);
        }
        progress_until([&] {
            for (auto &op : ops) if (!op->comp.done) return false;
            return true;
        });
        for (auto &op : ops) {
            expect_put_delivered(*op);
        }
        flush(ab);
    }

};

/* Interfaces, endpoints, registrations, keys, sealed puts and records,
 * made and destroyed over and over: after a warm-up, what the process
 * holds stays flat. A leak of any of them would grow with the cycles. */
TEST_F(uct_crypt_bulk_test, create_destroy_cycles_keep_memory_flat)
{
    if (test_util::under_sanitizer()) {
        GTEST_SKIP() << "a sanitizer's allocator hides what the process "
                        "holds (LeakSanitizer checks the ASan build)";
    }
    /* (sealed inline: pool threads made and joined every cycle add glibc's
     * own per-thread bookkeeping to the count; the pool's teardown is
     * LeakSanitizer's to check) */
    const settings_t settings = {{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "0"}};
    const int warmup = 50, cycles = 2000;
    auto cycle = [&](uint64_t seq) {
        open_pair(settings, settings);
        post_put(ab, a, b, new_op(), 3 * 4096 + 7, seq);
        progress_until([&] { return ops.back()->comp.done != 0; });
        expect_put_delivered(*ops.back());
        auto payload = make_payload(seq, 64);
        send_retrying([&] { return uct_ep_am_short(ba, kAmId, seq, payload.data(), 64); });
        progress_until([&] { return a.received.size() == 1u; });
        close_pair();
    };
    for (int i = 0; i < warmup; ++i) {
        cycle(i);
    }
    size_t heap0 = test_util::heap_in_use(), rss0 = test_util::rss_bytes();
    size_t fds0 = test_util::open_fds();
    for (int i = 0; i < cycles; ++i) {
        cycle(warmup + i);
        ASSERT_FALSE(HasFatalFailure()) << "cycle " << i;
    }
    long heap_growth = (long)test_util::heap_in_use() - (long)heap0;
    long rss_growth  = (long)test_util::rss_bytes() - (long)rss0;
    printf("  %d create/destroy cycles after %d: heap %+ld bytes (%+ld per cycle), "
           "rss %+ld KiB\n", cycles, warmup, heap_growth, heap_growth / cycles,
           rss_growth / 1024);
    /* Measured: a step of up to about 36 KiB whatever the number of
     * cycles (UCX's own tables settling: +6 KiB in 1000 cycles on 1.13,
     * +37 KiB in 1000 and +34 KiB in 3000 on 1.22), not in proportion to
     * them. A leaked registration is about 100 bytes a cycle (two are
     * made), an endpoint or a connection hundreds, an iface tens of KiB.
     * LeakSanitizer (the --enable-sanitizers build) sees the unreferenced
     * ones; this sees those that stay referenced and pile up too. */
    EXPECT_LT(heap_growth, (64L << 10) + 16L * cycles);
    EXPECT_LT(rss_growth, 8L << 20);
    EXPECT_EQ(test_util::open_fds(), fds0) << "a socket or eventfd left open";
}

TEST_F(uct_crypt_bulk_test, every_size_class_pipelined_on_two_threads)
{
    check_sizes({{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "2"}});
}

/* A calibration profile out of range (a hand-edited or corrupted file):
 * its values are ignored with a warning, the defaults stand, and the
 * iface opens (values beyond the integer types were converted first,
 * which is undefined, and came out as a segment that failed the iface) */
TEST_F(uct_crypt_bulk_test, profile_out_of_range_is_ignored)
{
    char path[] = "/tmp/ucx-crypt-gtest-profile.XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    const std::string text = "segment 1e300\nthreads 1e300\nsegment nan\nthreads -5\n";
    ASSERT_EQ(write(fd, text.data(), text.size()), (ssize_t)text.size());
    close(fd);
    check_sizes({{"PROFILE", path}, {"BULK_SEGMENT", "auto"}, {"BULK_THREADS", "auto"}});
    unlink(path);
}

TEST_F(uct_crypt_bulk_test, every_size_class_sealed_inline)
{
    check_sizes({{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "0"}});
}

TEST_F(uct_crypt_bulk_test, every_size_class_k1_above_max_outstanding)
{
    check_sizes({{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "2"},
                 {"BULK_MAX_OUTSTANDING", "1"}});
}

TEST_F(uct_crypt_bulk_test, every_size_class_naive)
{
    check_sizes({{"BULK_MODE", "naive"}});
}

TEST_F(uct_crypt_bulk_test, many_puts_on_many_endpoints_exhaust_the_bounce_pool)
{
    settings_t settings = {{"BULK_SEGMENT", "4k"}, {"BULK_DEPTH", "2"},
                           {"BULK_THREADS", "2"}};
    open_pair(settings, settings);
    std::vector<uct_ep_h> eps_ab = {ab, connect(a, b), connect(a, b), connect(a, b)};
    uint64_t seq = 0;
    for (int round = 0; round < 8; ++round) {
        for (uct_ep_h ep : eps_ab) {
            post_put(ep, a, b, new_op(), 65536 + 13 * seq, seq);
            ++seq;
        }
    }
    progress_until([&] {
        for (auto &op : ops) if (!op->comp.done) return false;
        return true;
    }, 60);
    for (auto &op : ops) {
        expect_put_delivered(*op);
    }
    for (uct_ep_h ep : eps_ab) {
        flush(ep);
    }
}

TEST_F(uct_crypt_bulk_test, flush_waits_for_the_targets_acknowledgement)
{
    settings_t settings = {{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "1"}};
    open_pair(settings, settings);
    put_op &op = new_op();
    post_put(ab, a, b, op, 256 * 1024, 1);
    flush(ab); /* returns only when the put has completed */
    expect_put_delivered(op);
}

/* get = the peer seals and puts: every size class, data in place and
 * opened before the get completes */
TEST_F(uct_crypt_bulk_test, get_every_size_class_pipelined)
{
    check_get_sizes({{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "2"}});
}

TEST_F(uct_crypt_bulk_test, get_every_size_class_naive)
{
    check_get_sizes({{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "0"}, {"BULK_MODE", "naive"}});
}

TEST_F(uct_crypt_bulk_test, flush_waits_for_a_get)
{
    settings_t settings = {{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "1"}};
    open_pair(settings, settings);
    put_op &op = new_op();
    post_get(ab, a, b, op, 256 * 1024, 3);
    flush(ab);
    expect_put_delivered(op);
}

/* UCP's worker flush asks only uct_iface_flush: it is not done while a
 * get waits for the peer's data (an MPI_Win_fence under UCX 1.22 returned
 * with the destination untouched) or a put for its acknowledgement */
TEST_F(uct_crypt_bulk_test, iface_flush_waits_for_gets)
{
    check_iface_flush_waits({{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "1"}}, true);
}

TEST_F(uct_crypt_bulk_test, iface_flush_waits_for_puts)
{
    check_iface_flush_waits({{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "1"}}, false);
}

/* An AM sent after a fence is delivered only once a put posted before the
 * fence is in place and opened at the target, although the put is still
 * being sealed when the AM is posted; pending requests queued behind the
 * fence go out in order, and a flush after them completes */
TEST_F(uct_crypt_bulk_test, fence_orders_an_am_behind_a_put_still_inside_crypt)
{
    settings_t settings = {{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "1"}};
    open_pair(settings, settings);
    put_op &op = new_op();
    std::vector<std::vector<uint8_t>> seen; /* the target's buffer, per AM */
    b.on_am = [&] {
        seen.emplace_back(op.dst.buffer.begin(), op.dst.buffer.begin() + op.len);
    };
    post_put(ab, a, b, op, 1 << 20, 11);
    ASSERT_EQ(uct_ep_fence(ab, 0), UCS_OK);

    /* the put is not announced yet: the AM has to wait */
    std::vector<uint8_t> payloads[3];
    std::vector<std::unique_ptr<pending_sender>> pending;
    for (uint64_t k = 0; k < 3; ++k) {
        payloads[k] = make_payload(k, 32);
        pending.emplace_back(new pending_sender);
        pending.back()->super.func = pending_send;
        pending.back()->ep         = ab;
        pending.back()->payload    = &payloads[k];
        pending.back()->seq        = k;
    }
    ASSERT_EQ(uct_ep_am_short(ab, kAmId, 0, payloads[0].data(), 32),
              UCS_ERR_NO_RESOURCE) << "an AM overtook the fence";
    for (auto &p : pending) {
        ASSERT_EQ(uct_ep_pending_add(ab, &p->super, 0), UCS_OK);
    }
    flush(ab);
    progress_until([&] { return (b.received.size() == 3) && op.comp.done; });
    for (uint64_t k = 0; k < 3; ++k) {
        expect_message(b.received[k], k, 32);
        EXPECT_EQ(seen[k], make_payload(op.seq, op.len))
                << "AM " << k << " was delivered before the put was in place";
    }
    expect_put_delivered(op);
    /* the fence is gone: sends go straight out again */
    send_retrying([&] { return uct_ep_am_short(ab, kAmId, 3, payloads[0].data(), 32); });
}

/* A get before a fence is done before anything after the fence is sent:
 * the target reads the range on its pool, after later records arrived */
TEST_F(uct_crypt_bulk_test, fence_orders_an_am_behind_a_get)
{
    settings_t settings = {{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "1"}};
    open_pair(settings, settings);
    put_op &op = new_op();
    post_get(ab, a, b, op, 256 * 1024, 12);
    ASSERT_EQ(uct_ep_fence(ab, 0), UCS_OK);
    bool get_done_at_delivery = false;
    b.on_am = [&] { get_done_at_delivery = op.comp.done; };
    auto payload = make_payload(5, 16);
    send_retrying([&] { return uct_ep_am_short(ab, kAmId, 5, payload.data(), 16); });
    EXPECT_TRUE(op.comp.done) << "an AM left before the get before the fence was done";
    progress_until([&] { return b.received.size() == 1; });
    EXPECT_TRUE(get_done_at_delivery);
    expect_put_delivered(op);
}

/* A get is done when its answer opened, not a round trip later: when it
 * completes, the target has not taken our ACK for the answer yet
 * (bulk_bytes_sealed counts the ACKs taken). Wire version 11 completed it
 * on GET_DONE, which the target sent once it had taken that ACK. */
static stats_read_t g_read_stats;
static uint64_t g_acked_at_completion;

TEST_F(uct_crypt_bulk_test, a_get_is_done_when_its_answer_opened)
{
    settings_t settings = {{"BULK_SEGMENT", "4k"}};
    open_pair(settings, settings);
    g_read_stats = (stats_read_t)dlsym(crypt_plugin::handle(), "uct_crypt_stats_read");
    ASSERT_NE(g_read_stats, nullptr);
    for (size_t len : {size_t(0), size_t(4096), size_t(64 * 1024 + 5)}) {
        put_op &op = new_op();
        uct_iov_t iov = prepare(op, b, a, len, 30 + len, false);
        op.comp.super.func = [](uct_completion_t *self) {
            uct_crypt_stats_t stats = {};
            g_read_stats(&stats);
            g_acked_at_completion = stats.bulk_bytes_sealed;
            put_done(self);
        };
        uint64_t acked     = wire_stat(&uct_crypt_stats_t::bulk_bytes_sealed);
        ucs_status_t status;
        send_retrying([&] {
            return status = uct_ep_get_zcopy(ab, &iov, 1,
                                             (uint64_t)op.src.buffer.data(),
                                             op.rkey.rkey, &op.comp.super);
        });
        ASSERT_EQ(status, UCS_INPROGRESS);
        progress_until([&] { return op.comp.done != 0; });
        expect_put_delivered(op);
        EXPECT_EQ(g_acked_at_completion, acked)
                << len << " B: the get waited for the target to take our ACK";
        /* the target's own put completes on that ACK, a little later */
        progress_until([&] {
            return wire_stat(&uct_crypt_stats_t::bulk_bytes_sealed) == acked + len;
        });
    }
}

/* A get may read only memory the target registered: a range that runs
 * past it fails the requesting flow at the target, and nothing arrives */
TEST_F(uct_crypt_bulk_test, get_outside_registered_memory_refused)
{
    settings_t settings = {{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "1"}};
    open_pair(settings, settings);
    uint64_t before = failures(UCT_CRYPT_FAIL_MALFORMED);
    put_op &op = new_op();
    post_get(ab, a, b, op, 8192, 4, 4096 + 64 /* past the 64-byte slack */);
    progress_until([&] { return !b.failed_eps.empty(); });
    for (int i = 0; i < 10000; ++i) {
        uct_worker_progress(worker);
    }
    EXPECT_EQ(failures(UCT_CRYPT_FAIL_MALFORMED), before + 1);
    EXPECT_FALSE(op.comp.done && (op.comp.status == UCS_OK))
            << "a refused get completed successfully";
    EXPECT_EQ(op.dst.buffer, std::vector<uint8_t>(op.dst.buffer.size(), 0))
            << "bytes arrived for a refused get";
}

/* A segment announced for memory the target did not register is not
 * opened there (nor zeroed): the flow fails, the put never completes */
TEST_F(uct_crypt_bulk_test, put_outside_registered_memory_refused)
{
    check_put_outside_registered();
}

/* A peer reaches only the region whose remote key it was handed: a put or
 * a get at another registered region under that key, or a put under a
 * guessed key, is refused at the target and moves nothing (before region
 * tokens, any registered memory was open to every key holder) */
TEST_F(uct_crypt_bulk_test, put_into_another_region_than_its_key_refused)
{
    check_reach(REACH_PUT_INTO_ANOTHER_REGION);
}

TEST_F(uct_crypt_bulk_test, get_from_another_region_than_its_key_refused)
{
    check_reach(REACH_GET_FROM_ANOTHER_REGION);
}

TEST_F(uct_crypt_bulk_test, put_under_a_guessed_key_refused)
{
    check_reach(REACH_PUT_WITH_A_GUESSED_KEY);
}

/* A progress thread asleep on the iface's event fd (ucp_worker_wait) is
 * woken when a pool thread has sealed a segment: nothing else happens on
 * the wire before progress sends it, so the wake-up is the pool's. */
TEST_F(uct_crypt_bulk_test, pool_threads_wake_a_sleeping_progress_thread)
{
    /* a bounce slot for every segment: the pool seals all of them without
     * waiting for progress to free one */
    settings_t settings = {{"BULK_SEGMENT", "64k"}, {"BULK_THREADS", "1"},
                           {"BULK_DEPTH", "64"}};
    open_pair(settings, settings);
    flush(ab); /* connected, quiet */
    int fd = -1;
    ASSERT_EQ(uct_iface_event_fd_get(a.iface, &fd), UCS_OK);
    struct pollfd pfd = {fd, POLLIN, 0};
    bool busy = false;

    /* A put posted while the iface is armed: no progress from then on, so
     * only the pool can make the fd readable, and it must (its first job
     * finds the iface armed). Re-arming must end in BUSY while a sealed
     * segment waits. Once in a while the post itself finds every segment
     * sealed already (the test thread was preempted between submitting
     * and sending) and sends them all: then nothing waits, no further
     * wake-up comes, and that put cannot show BUSY; another one is tried. */
    for (int attempt = 0; (attempt < 12) && !busy; ++attempt) {
        ucs_status_t status;
        deadline limit(10);
        do {
            uct_worker_progress(worker);
            status = uct_iface_event_arm(a.iface, UCT_EVENT_SEND_COMP | UCT_EVENT_RECV);
        } while (((status == UCS_ERR_BUSY) || (poll(&pfd, 1, 0) > 0)) && !limit.passed());
        ASSERT_EQ(status, UCS_OK);
        ASSERT_EQ(poll(&pfd, 1, 0), 0) << "armed and quiet before the put";

        put_op &op = new_op();
        post_put(ab, a, b, op, 2 << 20, 5 + attempt);
        ASSERT_EQ(poll(&pfd, 1, 5000), 1) << "not woken by the sealed segments";
        busy = (uct_iface_event_arm(a.iface, UCT_EVENT_SEND_COMP | UCT_EVENT_RECV) ==
                UCS_ERR_BUSY);
        /* woken for a segment the post sent: wait for the next one */
        while (!busy && (poll(&pfd, 1, 2000) == 1)) {
            busy = (uct_iface_event_arm(a.iface, UCT_EVENT_SEND_COMP |
                                        UCT_EVENT_RECV) == UCS_ERR_BUSY);
        }
        progress_until([&] { return op.comp.done != 0; });
        expect_put_delivered(op);
    }
    EXPECT_TRUE(busy) << "woken, but no sealed segment ever waited";
}

/* Each stream tamper case through the real transport: the target drops
 * the segment, fails its endpoint, counts the reason, and the put never
 * completes successfully at the initiator. */
struct bulk_fault_case {
    const char              *fault;
    uct_crypt_fail_reason_t reason;
};

class uct_crypt_bulk_tamper_test : public uct_crypt_bulk_test,
                                   public ::testing::WithParamInterface<bulk_fault_case> {
protected:
    /* `threads` 0: sealed on the progress thread (on crypt's own wire:
     * straight into the frame); 1: by the pool into bounce buffers. The
     * target opens on a pool of `target_threads` (the same by default):
     * with 4, segments after the tampered one are opened beside it, often
     * before it, and still none of them is left in place */
    void check_tamper(const bulk_fault_case &fc, const char *threads,
                      const char *target_threads = nullptr)
    {
        settings_t common = {{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", threads}};
        settings_t target = {{"BULK_SEGMENT", "4k"},
                             {"BULK_THREADS", target_threads ? target_threads : threads}};
        settings_t tamper = common;
        tamper.emplace_back("FAULT", fc.fault);
        tamper.emplace_back("FAULT_AFTER", "3"); /* the third segment overall */
        uint64_t before = failures(fc.reason);
        open_pair(tamper, target);

        put_op &op = new_op();
        post_put(ab, a, b, op, 16 * 4096, 7);
        progress_until([&] { return !b.failed_eps.empty(); });
        for (int i = 0; i < 10000; ++i) {
            uct_worker_progress(worker);
        }
        ASSERT_EQ(b.failed_eps.size(), 1u);
        EXPECT_EQ(b.failed_eps[0], ba);
        EXPECT_EQ(failures(fc.reason), before + 1) << fc.fault;
        EXPECT_FALSE(op.comp.done && (op.comp.status == UCS_OK))
                << "a tampered put completed successfully";
        /* the third segment is not the plaintext at the target */
        auto want = make_payload(op.seq, op.len);
        EXPECT_NE(std::vector<uint8_t>(op.dst.buffer.begin() + 2 * 4096,
                                       op.dst.buffer.begin() + 3 * 4096),
                  std::vector<uint8_t>(want.begin() + 2 * 4096, want.begin() + 3 * 4096));
        /* nor is any segment after it, opened or not */
        for (size_t k = 3; k < 16; ++k) {
            EXPECT_NE(std::vector<uint8_t>(op.dst.buffer.begin() + k * 4096,
                                           op.dst.buffer.begin() + (k + 1) * 4096),
                      std::vector<uint8_t>(want.begin() + k * 4096,
                                           want.begin() + (k + 1) * 4096))
                    << "segment " << k << " after the tampered one was left in place";
        }
    }
};

TEST_P(uct_crypt_bulk_tamper_test, detected_and_never_completed)
{
    check_tamper(GetParam(), "1");
}

TEST_P(uct_crypt_bulk_tamper_test, opened_by_the_targets_pool_detected)
{
    check_tamper(GetParam(), "0", "4");
}

static const std::vector<bulk_fault_case> stream_faults = {
        {"bulk_flip_ciphertext", UCT_CRYPT_FAIL_AUTH},
        {"bulk_flip_tag",        UCT_CRYPT_FAIL_AUTH},
        {"bulk_drop",            UCT_CRYPT_FAIL_BULK_ORDER},
        {"bulk_reorder",         UCT_CRYPT_FAIL_BULK_ORDER},
        {"bulk_truncate",        UCT_CRYPT_FAIL_AUTH},
        {"bulk_move",            UCT_CRYPT_FAIL_AUTH},
        {"bulk_splice",          UCT_CRYPT_FAIL_BULK_ORDER}};

static std::string bulk_fault_name(const ::testing::TestParamInfo<bulk_fault_case> &info)
{
    return info.param.fault;
}

INSTANTIATE_TEST_SUITE_P(stream, uct_crypt_bulk_tamper_test,
                         ::testing::ValuesIn(stream_faults), bulk_fault_name);

/* ---- the bulk engine on crypt's own wire -----------------------------------------
 * No inner puts: each segment is a frame right behind the record that
 * announces it (ciphertext and tag); the ciphertext is received straight
 * into the registered destination and opened there, by the target's pool. Sealed on the progress thread straight into
 * the frame, or by the pool into bounce buffers and copied. */
/* UCX's test_ucp_tag_match_rndv.bidir_multi_exp_post/3 (rendezvous by
 * fenced put on two lanes) completed a 128 MiB receive with 10.75 MiB of
 * it still zero: the next message's AM went out from the pending queue of
 * the fence before it, ahead of its own put. Requests that waited behind a
 * fence were let through while they were dispatched, sends after a new
 * fence included. */
TEST_F(uct_crypt_bulk_test, a_fence_posted_from_behind_a_fence_holds_the_sends_after_it)
{
    check_a_fence_posted_from_behind_a_fence();
}

/* A key carries the rights its region was registered with, as an HCA's
 * rkey does: a key to a region registered for remote reads alone (a
 * rendezvous send buffer, handed out for a get) writes nothing there, and
 * one registered for remote writes alone serves no read (crypto review
 * N6: one token opened both ways) */
TEST_F(uct_crypt_bulk_test, put_into_a_region_registered_for_reads_refused)
{
    check_reach(REACH_PUT_INTO_A_READ_ONLY_REGION);
}

TEST_F(uct_crypt_bulk_test, get_from_a_region_registered_for_writes_refused)
{
    check_reach(REACH_GET_FROM_A_WRITE_ONLY_REGION);
}

class uct_crypt_wire_bulk_test : public uct_crypt_bulk_test {
protected:
    uct_crypt_wire_bulk_test() { base_settings.clear(); }
};

TEST_F(uct_crypt_wire_bulk_test, put_into_a_region_registered_for_reads_refused)
{
    check_reach(REACH_PUT_INTO_A_READ_ONLY_REGION);
}

TEST_F(uct_crypt_wire_bulk_test, get_from_a_region_registered_for_writes_refused)
{
    check_reach(REACH_GET_FROM_A_WRITE_ONLY_REGION);
}

/* the same on crypt's own wire (segments as frames, the same records) */
TEST_F(uct_crypt_wire_bulk_test, put_into_another_region_than_its_key_refused)
{
    check_reach(REACH_PUT_INTO_ANOTHER_REGION);
}

TEST_F(uct_crypt_wire_bulk_test, get_from_another_region_than_its_key_refused)
{
    check_reach(REACH_GET_FROM_ANOTHER_REGION);
}

TEST_F(uct_crypt_wire_bulk_test, put_under_a_guessed_key_refused)
{
    check_reach(REACH_PUT_WITH_A_GUESSED_KEY);
}

TEST_F(uct_crypt_wire_bulk_test, a_fence_posted_from_behind_a_fence_holds_the_sends_after_it)
{
    check_a_fence_posted_from_behind_a_fence();
}

TEST_F(uct_crypt_wire_bulk_test, every_size_class_sealed_into_the_frame)
{
    check_sizes({{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "0"}});
}

TEST_F(uct_crypt_wire_bulk_test, every_size_class_sealed_by_the_pool)
{
    check_sizes({{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "2"}});
}

TEST_F(uct_crypt_wire_bulk_test, every_size_class_pool_and_inline_mixed)
{
    check_sizes({{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "2"},
                 {"BULK_MAX_OUTSTANDING", "1"}});
}

TEST_F(uct_crypt_wire_bulk_test, default_segments_larger_than_a_frame_are_cut_to_one)
{
    /* 1 MiB asked for: a segment is one frame of the wire (256 KiB) */
    check_sizes({{"BULK_SEGMENT", "1m"}, {"BULK_THREADS", "0"}});
}

/* Segments ramp from 64 KiB to the segment size (64, 128, 256, 256...
 * KiB): every put around the ramp's edges lands whole, sealed by the pool
 * and opened by the target's */
static const std::vector<size_t> ramp_edges = {
        (64 << 10) - 1, 64 << 10, (64 << 10) + 1, (192 << 10) - 1, 192 << 10,
        (192 << 10) + 1, 448 << 10, (448 << 10) + 1, (704 << 10) + 5,
        (4 << 20) + 7};

TEST_F(uct_crypt_bulk_test, segments_ramp_and_every_edge_lands_whole)
{
    check_sizes({{"BULK_SEGMENT", "256k"}, {"BULK_THREADS", "2"}}, ramp_edges);
}

TEST_F(uct_crypt_wire_bulk_test, segments_ramp_and_every_edge_lands_whole)
{
    check_sizes({{"BULK_SEGMENT", "256k"}, {"BULK_THREADS", "2"}}, ramp_edges);
}

TEST_F(uct_crypt_wire_bulk_test, get_every_size_class)
{
    check_get_sizes({{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "0"}});
}

TEST_F(uct_crypt_wire_bulk_test, iface_flush_waits_for_gets)
{
    check_iface_flush_waits({{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "0"}}, true);
}

TEST_F(uct_crypt_wire_bulk_test, put_outside_registered_memory_refused)
{
    check_put_outside_registered();
}

/* UCP discards an ep by flushing it with CANCEL and destroying it once
 * that completes (ucp_worker_discard_uct_ep); the peer cannot know. An
 * acknowledgement of a put that ep sent may still come: it completes
 * nothing and fails nothing (before: refused as malformed, which failed
 * every other ep to that peer). */
TEST_F(uct_crypt_wire_bulk_test, a_late_acknowledgement_for_a_destroyed_endpoint_fails_nothing)
{
    const settings_t inline_sealing = {{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "0"}};
    open_pair(inline_sealing, inline_sealing);
    uct_ep_h ab2 = connect(a, b);
    auto payload = make_payload(1, 64);
    for (uct_ep_h ep : {ab, ab2}) {
        send_retrying([&] { return uct_ep_am_short(ep, kAmId, 1, payload.data(), 64); });
    }
    send_retrying([&] { return uct_ep_am_short(ba, kAmId, 1, payload.data(), 64); });
    progress_until([&] { return (b.received.size() == 2u) && (a.received.size() == 1u); });

    /* one segment, sealed and written inline: in b's socket when the put
     * returns; ab goes before b acknowledges it */
    put_op &op = new_op();
    post_put(ab, a, b, op, 4096, 7);
    ASSERT_EQ(uct_ep_flush(ab, UCT_FLUSH_FLAG_CANCEL, NULL), UCS_OK);
    uct_ep_destroy(ab);
    eps.erase(std::find(eps.begin(), eps.end(), ab));
    ab = nullptr;
    EXPECT_TRUE(op.comp.done) << "a cancelled put completes when its ep goes";

    uint64_t malformed = failures(UCT_CRYPT_FAIL_MALFORMED);
    progress_until([&] {
        return std::equal(op.src.buffer.begin(), op.src.buffer.begin() + op.len,
                          op.dst.buffer.begin());
    });
    /* b's acknowledgement reaches a; then both ways still work */
    send_retrying([&] { return uct_ep_am_short(ba, kAmId, 2, payload.data(), 64); });
    send_retrying([&] { return uct_ep_am_short(ab2, kAmId, 2, payload.data(), 64); });
    progress_until([&] {
        return ((a.received.size() == 2u) && (b.received.size() == 3u)) ||
               !a.failed_eps.empty() || !b.failed_eps.empty();
    });
    EXPECT_TRUE(a.failed_eps.empty()) << "a late acknowledgement failed a's eps to b";
    EXPECT_TRUE(b.failed_eps.empty());
    EXPECT_EQ(failures(UCT_CRYPT_FAIL_MALFORMED), malformed);
}

/* A peer's get is answered on an ep of ours to it that is not being
 * discarded: one flushed with CANCEL is destroyed next, and the answer
 * (a put that completes when the requester acknowledges it) would die
 * with it, the requester's get never completing. */
TEST_F(uct_crypt_wire_bulk_test, a_get_is_answered_on_an_endpoint_that_is_not_being_discarded)
{
    const settings_t inline_sealing = {{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "0"}};
    open_pair(inline_sealing, inline_sealing);
    uct_ep_h ba2 = connect(b, a);
    auto payload = make_payload(1, 64);
    for (uct_ep_h ep : {ba, ba2}) {
        send_retrying([&] { return uct_ep_am_short(ep, kAmId, 1, payload.data(), 64); });
    }
    send_retrying([&] { return uct_ep_am_short(ab, kAmId, 1, payload.data(), 64); });
    progress_until([&] { return (a.received.size() == 2u) && (b.received.size() == 1u); });

    /* b discards ba (the first of its eps to a) as UCP does */
    ASSERT_EQ(uct_ep_flush(ba, UCT_FLUSH_FLAG_CANCEL, NULL), UCS_OK);
    uint64_t served = wire_stat(&uct_crypt_stats_t::bulk_gets_served);
    put_op &op = new_op();
    post_get(ab, a, b, op, 4096, 9);
    /* the answer, sealed and written inline, leaves in the call that
     * serves the request; ba goes right after, as UCP's discard ends */
    progress_until([&] {
        return wire_stat(&uct_crypt_stats_t::bulk_gets_served) > served;
    });
    uct_ep_destroy(ba);
    eps.erase(std::find(eps.begin(), eps.end(), ba));
    ba = nullptr;

    progress_until([&] { return op.comp.done || !a.failed_eps.empty(); });
    EXPECT_EQ(op.comp.status, UCS_OK);
    expect_put_delivered(op);
    EXPECT_TRUE(a.failed_eps.empty());
    EXPECT_TRUE(b.failed_eps.empty());
}

TEST_F(uct_crypt_wire_bulk_test, naive_mode_refused_with_the_fix)
{
    open_side_with(a, {});
    uct_md_config_t *md_config;
    ASSERT_EQ(uct_md_config_read(component, NULL, NULL, &md_config), UCS_OK);
    uct_md_h md;
    ASSERT_EQ(uct_md_open(component, md_name.c_str(), md_config, &md), UCS_OK);
    uct_config_release(md_config);
    uct_iface_config_t *config;
    ASSERT_EQ(uct_md_iface_config_read(md, "crypt", NULL, NULL, &config), UCS_OK);
    ASSERT_EQ(config_modify(config, "BULK_MODE", "naive"), UCS_OK);
    uct_iface_params_t params = {};
    params.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                  UCT_IFACE_PARAM_FIELD_DEVICE;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = "crypt";
    params.mode.device.dev_name = "lo";
    uct_iface_h iface = nullptr;
    EXPECT_NE(uct_iface_open(md, worker, &params, config, &iface), UCS_OK);
    if (iface) uct_iface_close(iface);
    uct_config_release(config);
    uct_md_close(md);
}

class uct_crypt_wire_bulk_tamper_test : public uct_crypt_bulk_tamper_test {
protected:
    uct_crypt_wire_bulk_tamper_test() { base_settings.clear(); }
};

TEST_P(uct_crypt_wire_bulk_tamper_test, sealed_into_the_frame_detected)
{
    check_tamper(GetParam(), "0");
}

TEST_P(uct_crypt_wire_bulk_tamper_test, sealed_by_the_pool_detected)
{
    check_tamper(GetParam(), "1");
}

TEST_P(uct_crypt_wire_bulk_tamper_test, received_in_place_opened_by_the_targets_pool_detected)
{
    check_tamper(GetParam(), "0", "4");
}

/* the stream's cases, and the wire's own rule: a segment's frame only
 * right behind its announcement, of the length announced; else the
 * connection closes */
static std::vector<bulk_fault_case> wire_faults()
{
    auto faults = stream_faults;
    faults.push_back({"bulk_frame_alone", UCT_CRYPT_FAIL_CONNECTION});
    faults.push_back({"bulk_frame_short", UCT_CRYPT_FAIL_CONNECTION});
    return faults;
}

INSTANTIATE_TEST_SUITE_P(wire, uct_crypt_wire_bulk_tamper_test,
                         ::testing::ValuesIn(wire_faults()), bulk_fault_name);

/* A flow that slept (this iface's last ep to its peer went) keeps its bulk
 * state: the next put wakes it, the bulk key is made again at the
 * generation it had, and the put lands whole, in place (acknowledged on
 * the ep the target made to its peer again, as UCP's reconnect would) */
TEST_F(uct_crypt_bulk_test, a_put_after_the_flow_slept_lands_whole)
{
    /* (quickstart.sh runs it again with UCX_CRYPT_REKEY_RECORDS=2: then
     * the bulk key has been updated before the flow sleeps) */
    const settings_t settings = {{"BULK_SEGMENT", "4k"}};
    open_pair(settings, settings);
    uint64_t slept = wire_stat(&uct_crypt_stats_t::flows_slept);
    uint64_t woken = wire_stat(&uct_crypt_stats_t::flows_woken);
    for (uint64_t seq = 1; seq <= 2; ++seq) {
        post_put(ab, a, b, new_op(), 3 * 4096 + 5, seq);
        progress_until([&] { return ops.back()->comp.done != 0; });
        expect_put_delivered(*ops.back());
    }

    eps.erase(std::find(eps.begin(), eps.end(), ba));
    uct_ep_destroy(ba);
    ba = nullptr;
    EXPECT_EQ(wire_stat(&uct_crypt_stats_t::flows_slept), slept + 1);
    ba = connect(b, a); /* (a new ep wakes nothing: a record does) */

    post_put(ab, a, b, new_op(), 2 * 4096 + 11, 3);
    progress_until([&] { return ops.back()->comp.done != 0; });
    expect_put_delivered(*ops.back());
    EXPECT_EQ(wire_stat(&uct_crypt_stats_t::flows_woken), woken + 1);
    EXPECT_TRUE(a.failed_eps.empty());
    EXPECT_TRUE(b.failed_eps.empty());
}
