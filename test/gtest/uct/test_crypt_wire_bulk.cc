/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The bulk engine on crypt's own wire (uct/crypt_bulk_test.h): no inner
 * puts; each segment is a frame right behind the record that announces it
 * (ciphertext and tag); the ciphertext is received straight into the
 * registered destination and opened there, by the target's pool. Sealed
 * on the progress thread straight into the frame, or by the pool into
 * bounce buffers and copied.
 */
#include "uct/crypt_bulk_test.h"

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

TEST_F(uct_crypt_wire_bulk_test, segments_to_a_target_without_bulk_fail_the_flow)
{
    check_segments_to_a_target_without_bulk();
}
