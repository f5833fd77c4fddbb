/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The bulk engine's fixture (uct/crypt_test.h), shared by its tests over a
 * UCX inner (test_crypt_bulk.cc) and over crypt's own wire
 * (test_crypt_wire_bulk.cc): registered regions, keys as UCP ships them,
 * puts and gets posted and checked, the tamper cases.
 */
#ifndef UCT_CRYPT_BULK_TEST_H
#define UCT_CRYPT_BULK_TEST_H

#include "uct/crypt_test.h"

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

    /* A target without the bulk engine (UCX_CRYPT_BULK=n there) asked for
     * no segments: one announced anyway (a key holder's, or ranks that
     * disagree) fails the flow as MALFORMED, is never opened, and the
     * target goes on (it dereferenced the engine it does not have before) */
    void check_segments_to_a_target_without_bulk()
    {
        open_pair({{"BULK_SEGMENT", "4k"}, {"BULK_THREADS", "0"}}, {{"BULK", "n"}});
        ASSERT_FALSE(b.attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY);
        uint64_t before = failures(UCT_CRYPT_FAIL_MALFORMED);
        put_op &op = new_op();
        post_put(ab, a, b, op, 8192, 13);
        progress_until([&] { return !b.failed_eps.empty(); });
        for (int i = 0; i < 10000; ++i) {
            uct_worker_progress(worker);
        }
        EXPECT_EQ(failures(UCT_CRYPT_FAIL_MALFORMED), before + 1);
        EXPECT_FALSE(op.comp.done && (op.comp.status == UCS_OK));
        /* (over a UCX inner the inner's put may have left ciphertext) */
        EXPECT_NE(std::vector<uint8_t>(op.dst.buffer.begin(), op.dst.buffer.begin() + op.len),
                  make_payload(op.seq, op.len))
                << "a put opened at a target without the bulk engine";
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

static const std::vector<bulk_fault_case> stream_faults = {
        {"bulk_flip_ciphertext", UCT_CRYPT_FAIL_AUTH},
        {"bulk_flip_tag",        UCT_CRYPT_FAIL_AUTH},
        {"bulk_drop",            UCT_CRYPT_FAIL_BULK_ORDER},
        {"bulk_reorder",         UCT_CRYPT_FAIL_BULK_ORDER},
        {"bulk_truncate",        UCT_CRYPT_FAIL_AUTH},
        {"bulk_move",            UCT_CRYPT_FAIL_AUTH},
        {"bulk_splice",          UCT_CRYPT_FAIL_BULK_ORDER}};

inline std::string bulk_fault_name(const ::testing::TestParamInfo<bulk_fault_case> &info)
{
    return info.param.fault;
}

/* Segments ramp from 64 KiB to the segment size (64, 128, 256, 256...
 * KiB): every put around the ramp's edges lands whole, sealed by the pool
 * and opened by the target's */
static const std::vector<size_t> ramp_edges = {
        (64 << 10) - 1, 64 << 10, (64 << 10) + 1, (192 << 10) - 1, 192 << 10,
        (192 << 10) + 1, 448 << 10, (448 << 10) + 1, (704 << 10) + 5,
        (4 << 20) + 7};

#endif
