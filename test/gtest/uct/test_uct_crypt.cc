/*
 * The crypt transport at the UCT level: two crypt ifaces in one process,
 * over the inner tcp on loopback, driven through the public UCT API the way
 * UCP drives it. The plugin is loaded the way the launcher loads it (it
 * registers itself when it is loaded), before UCT is first queried.
 *
 * Covered: every AM flavour and size from 0 to the advertised maximum with
 * content checks; flush; fence ordering; pending under NO_RESOURCE; an
 * endpoint error (and no delivery) after a tampered record.
 */
#include <gtest/gtest.h>

#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>
#include <ucs/sys/compiler_def.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {

const uint8_t kAmId = 7;

struct received_message {
    uint64_t             header; /* first 8 bytes (am_short's header) */
    std::vector<uint8_t> payload;
};

/* one side: md, iface, what its AM handler received, what its error
 * handler saw */
struct side {
    uct_md_h                      md      = nullptr;
    uct_iface_h                   iface   = nullptr;
    uct_iface_attr_t              attr    = {};
    std::vector<received_message> received;
    std::vector<uct_ep_h>         failed_eps;
};

ucs_status_t am_handler(void *arg, void *data, size_t length, unsigned flags)
{
    side *s = static_cast<side*>(arg);
    received_message msg;
    msg.header = 0;
    if (length >= sizeof(uint64_t)) {
        memcpy(&msg.header, data, sizeof(uint64_t));
        msg.payload.assign((uint8_t*)data + sizeof(uint64_t), (uint8_t*)data + length);
    } else {
        msg.payload.assign((uint8_t*)data, (uint8_t*)data + length);
    }
    s->received.push_back(std::move(msg));
    return UCS_OK;
}

ucs_status_t err_handler(void *arg, uct_ep_h ep, ucs_status_t status)
{
    static_cast<side*>(arg)->failed_eps.push_back(ep);
    return UCS_OK;
}

/* a wall-clock limit for progress loops: a test fails, it never hangs */
struct deadline {
    explicit deadline(double seconds) :
        end(std::chrono::steady_clock::now() +
            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(seconds))) {}
    bool passed() const { return std::chrono::steady_clock::now() > end; }
    std::chrono::steady_clock::time_point end;
};

/* payload byte i of message `seq`: position and message dependent */
uint8_t pattern(uint64_t seq, size_t i)
{
    return (uint8_t)(seq * 131 + i * 7 + (i >> 8));
}

std::vector<uint8_t> make_payload(uint64_t seq, size_t len)
{
    std::vector<uint8_t> p(len);
    for (size_t i = 0; i < len; ++i) {
        p[i] = pattern(seq, i);
    }
    return p;
}

struct bcopy_arg {
    uint64_t                    header;
    const std::vector<uint8_t> *payload;
};

size_t pack_bcopy(void *dest, void *arg)
{
    bcopy_arg *a = static_cast<bcopy_arg*>(arg);
    memcpy(dest, &a->header, sizeof(a->header));
    if (!a->payload->empty()) {
        memcpy((uint8_t*)dest + sizeof(a->header), a->payload->data(), a->payload->size());
    }
    return sizeof(a->header) + a->payload->size();
}

struct completion {
    uct_completion_t super;
    int              done = 0;
    ucs_status_t     status = UCS_OK;
};

void completion_cb(uct_completion_t *self)
{
    completion *c = ucs_container_of(self, completion, super);
    c->done   = 1;
    c->status = self->status;
}

} // namespace

class uct_crypt_test : public ::testing::Test {
protected:
    static void SetUpTestSuite()
    {
        /* A job secret, as a deployment has one: 32 random bytes, 0600 */
        char path[] = "/tmp/ucx-crypt-gtest-key.XXXXXX";
        int fd = mkstemp(path);
        ASSERT_GE(fd, 0);
        uint8_t secret[32];
        FILE *urandom = fopen("/dev/urandom", "rb");
        ASSERT_NE(urandom, nullptr);
        ASSERT_EQ(fread(secret, 1, sizeof(secret), urandom), sizeof(secret));
        fclose(urandom);
        ASSERT_EQ(write(fd, secret, sizeof(secret)), (ssize_t)sizeof(secret));
        fchmod(fd, 0600);
        close(fd);
        key_path = path;
        setenv("UCX_CRYPT_KEY_FILE", path, 1);
        setenv("UCX_CRYPT_TLS", "tcp", 1);

        plugin = dlopen(UCT_CRYPT_PLUGIN, RTLD_NOW | RTLD_GLOBAL);
        ASSERT_NE(plugin, nullptr) << dlerror();
    }

    static void TearDownTestSuite()
    {
        unlink(key_path.c_str());
        /* the plugin stays loaded: UCX keeps pointers into it */
    }

    void SetUp() override
    {
        ASSERT_EQ(ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async), UCS_OK);
        ASSERT_EQ(uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &worker), UCS_OK);
        find_crypt_resource();
    }

    void TearDown() override
    {
        for (uct_ep_h ep : eps) {
            uct_ep_destroy(ep);
        }
        for (side *s : {&a, &b}) {
            if (s->iface) {
                uct_iface_close(s->iface);
            }
            if (s->md) {
                uct_md_close(s->md);
            }
        }
        uct_worker_destroy(worker);
        ucs_async_context_destroy(async);
    }

    /* the crypt md wrapping tcp, and its loopback device */
    void find_crypt_resource()
    {
        uct_component_h *components;
        unsigned count;
        ASSERT_EQ(uct_query_components(&components, &count), UCS_OK);
        for (unsigned i = 0; i < count; ++i) {
            uct_component_attr_t attr = {};
            attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                              UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
            ASSERT_EQ(uct_component_query(components[i], &attr), UCS_OK);
            EXPECT_STRNE(attr.name, "tcp") << "plaintext tcp still visible";
            if (strcmp(attr.name, "crypt") != 0) {
                continue;
            }
            std::vector<uct_md_resource_desc_t> mds(attr.md_resource_count);
            attr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
            attr.md_resources = mds.data();
            ASSERT_EQ(uct_component_query(components[i], &attr), UCS_OK);
            for (auto &md : mds) {
                if (std::string(md.md_name) == "tcp") {
                    component = components[i];
                    md_name   = md.md_name;
                }
            }
        }
        uct_release_component_list(components);
        ASSERT_NE(component, nullptr) << "no crypt md wrapping tcp";
    }

    void open_side(side &s, const char *fault = nullptr, const char *fault_after = nullptr)
    {
        uct_md_config_t *md_config;
        ASSERT_EQ(uct_md_config_read(component, NULL, NULL, &md_config), UCS_OK);
        ASSERT_EQ(uct_md_open(component, md_name.c_str(), md_config, &s.md), UCS_OK);
        uct_config_release(md_config);

        uct_tl_resource_desc_t *resources;
        unsigned count;
        std::string dev;
        ASSERT_EQ(uct_md_query_tl_resources(s.md, &resources, &count), UCS_OK);
        for (unsigned i = 0; i < count; ++i) {
            EXPECT_STREQ(resources[i].tl_name, "crypt");
            if (dev.empty() || !strcmp(resources[i].dev_name, "lo")) {
                dev = resources[i].dev_name;
            }
        }
        uct_release_tl_resource_list(resources);
        ASSERT_FALSE(dev.empty());

        uct_iface_config_t *config;
        ASSERT_EQ(uct_md_iface_config_read(s.md, "crypt", NULL, NULL, &config), UCS_OK);
        if (fault) {
            ASSERT_EQ(uct_config_modify(config, "FAULT", fault), UCS_OK);
            ASSERT_EQ(uct_config_modify(config, "FAULT_AFTER", fault_after), UCS_OK);
        }
        uct_iface_params_t params = {};
        params.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                            UCT_IFACE_PARAM_FIELD_DEVICE |
                            UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                            UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                            UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
        params.open_mode                  = UCT_IFACE_OPEN_MODE_DEVICE;
        params.mode.device.tl_name        = "crypt";
        params.mode.device.dev_name       = dev.c_str();
        params.err_handler                = err_handler;
        params.err_handler_arg            = &s;
        params.err_handler_flags          = 0;
        ucs_status_t status = uct_iface_open(s.md, worker, &params, config, &s.iface);
        uct_config_release(config);
        ASSERT_EQ(status, UCS_OK);
        ASSERT_EQ(uct_iface_query(s.iface, &s.attr), UCS_OK);
        ASSERT_EQ(uct_iface_set_am_handler(s.iface, kAmId, am_handler, &s, 0), UCS_OK);
        uct_iface_progress_enable(s.iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    }

    uct_ep_h connect(side &from, side &to)
    {
        std::vector<uint8_t> dev_addr(to.attr.device_addr_len),
                             iface_addr(to.attr.iface_addr_len);
        EXPECT_TRUE(to.attr.cap.flags & UCT_IFACE_FLAG_CONNECT_TO_IFACE);
        EXPECT_EQ(uct_iface_get_device_address(to.iface, (uct_device_addr_t*)dev_addr.data()), UCS_OK);
        EXPECT_EQ(uct_iface_get_address(to.iface, (uct_iface_addr_t*)iface_addr.data()), UCS_OK);
        EXPECT_TRUE(uct_iface_is_reachable(from.iface, (uct_device_addr_t*)dev_addr.data(),
                                           (uct_iface_addr_t*)iface_addr.data()));
        uct_ep_params_t params = {};
        params.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                            UCT_EP_PARAM_FIELD_IFACE_ADDR;
        params.iface      = from.iface;
        params.dev_addr   = (uct_device_addr_t*)dev_addr.data();
        params.iface_addr = (uct_iface_addr_t*)iface_addr.data();
        uct_ep_h ep = nullptr;
        EXPECT_EQ(uct_ep_create(&params, &ep), UCS_OK);
        eps.push_back(ep);
        return ep;
    }

    void open_pair()
    {
        open_side(a);
        open_side(b);
        ab = connect(a, b);
        ba = connect(b, a);
    }

    void progress_until(const std::function<bool()> &done, double seconds = 20)
    {
        deadline limit(seconds);
        while (!done() && !limit.passed()) {
            uct_worker_progress(worker);
        }
        ASSERT_TRUE(done()) << "timed out";
    }

    /* retry while the inner has no room, progressing meanwhile */
    template <typename Send> void send_retrying(Send send)
    {
        ucs_status_t status;
        deadline limit(20);
        while (((status = send()) == UCS_ERR_NO_RESOURCE) && (!limit.passed())) {
            uct_worker_progress(worker);
        }
        ASSERT_TRUE((status == UCS_OK) || (status == UCS_INPROGRESS))
                << ucs_status_string(status);
    }

    void flush(uct_ep_h ep)
    {
        completion comp;
        comp.super.func   = completion_cb;
        comp.super.count  = 1;
        comp.super.status = UCS_OK;
        ucs_status_t status;
        deadline limit(20);
        while (((status = uct_ep_flush(ep, 0, &comp.super)) == UCS_ERR_NO_RESOURCE) &&
               (!limit.passed())) {
            uct_worker_progress(worker);
        }
        if (status == UCS_INPROGRESS) {
            progress_until([&] { return comp.done != 0; });
            status = comp.status;
        }
        ASSERT_EQ(status, UCS_OK);
    }

    void expect_message(const received_message &m, uint64_t seq, size_t len)
    {
        ASSERT_EQ(m.header, seq);
        ASSERT_EQ(m.payload, make_payload(seq, len)) << "payload of " << len << " bytes";
    }

    /* sizes to cover up to `max`: every size to 64, both sides of each power
     * of two, and the maximum itself */
    static std::vector<size_t> sizes_up_to(size_t max)
    {
        std::vector<size_t> sizes;
        for (size_t s = 0; s <= max && s <= 64; ++s) {
            sizes.push_back(s);
        }
        for (size_t p = 128; p < max; p *= 2) {
            sizes.push_back(p - 1);
            sizes.push_back(p);
            sizes.push_back(p + 1);
        }
        sizes.push_back(max - 1);
        sizes.push_back(max);
        return sizes;
    }

    static void *plugin;
    static std::string key_path;
    ucs_async_context_t *async = nullptr;
    uct_worker_h worker = nullptr;
    uct_component_h component = nullptr;
    std::string md_name;
    side a, b;
    uct_ep_h ab = nullptr, ba = nullptr;
    std::vector<uct_ep_h> eps;
};

void *uct_crypt_test::plugin = nullptr;
std::string uct_crypt_test::key_path;

TEST_F(uct_crypt_test, capabilities_are_am_only_and_reduced_by_the_record_overhead)
{
    open_pair();
    uint64_t forbidden = UCT_IFACE_FLAG_PUT_SHORT | UCT_IFACE_FLAG_PUT_BCOPY |
                         UCT_IFACE_FLAG_PUT_ZCOPY | UCT_IFACE_FLAG_GET_SHORT |
                         UCT_IFACE_FLAG_GET_BCOPY | UCT_IFACE_FLAG_GET_ZCOPY |
                         UCT_IFACE_FLAG_ATOMIC_CPU | UCT_IFACE_FLAG_ATOMIC_DEVICE |
                         UCT_IFACE_FLAG_TAG_EAGER_SHORT | UCT_IFACE_FLAG_TAG_EAGER_BCOPY |
                         UCT_IFACE_FLAG_TAG_EAGER_ZCOPY | UCT_IFACE_FLAG_TAG_RNDV_ZCOPY;
    EXPECT_EQ(a.attr.cap.flags & forbidden, 0u);
    EXPECT_EQ(a.attr.cap.atomic32.op_flags | a.attr.cap.atomic64.op_flags |
              a.attr.cap.atomic32.fop_flags | a.attr.cap.atomic64.fop_flags, 0u);
    EXPECT_TRUE(a.attr.cap.flags & UCT_IFACE_FLAG_AM_SHORT);
    EXPECT_TRUE(a.attr.cap.flags & UCT_IFACE_FLAG_AM_BCOPY);
    EXPECT_TRUE(a.attr.cap.flags & UCT_IFACE_FLAG_AM_ZCOPY);
    EXPECT_GT(a.attr.cap.am.max_short, sizeof(uint64_t));
    EXPECT_GT(a.attr.cap.am.max_bcopy, 1024u);
}

TEST_F(uct_crypt_test, am_short_every_size_content_checked)
{
    open_pair();
    size_t max = a.attr.cap.am.max_short - sizeof(uint64_t); /* max_short counts the header */
    auto sizes = sizes_up_to(max);
    uint64_t seq = 0;
    for (size_t len : sizes) {
        auto payload = make_payload(seq, len);
        send_retrying([&] { return uct_ep_am_short(ab, kAmId, seq, payload.data(), len); });
        ++seq;
    }
    progress_until([&] { return b.received.size() == sizes.size(); });
    for (size_t i = 0; i < sizes.size(); ++i) {
        expect_message(b.received[i], i, sizes[i]);
    }
    /* one byte more than advertised is refused, not truncated */
    std::vector<uint8_t> too_big(max + 1);
    EXPECT_NE(uct_ep_am_short(ab, kAmId, 0, too_big.data(), max + 1), UCS_OK);
}

TEST_F(uct_crypt_test, am_short_iov_content_checked)
{
    open_pair();
    if (!(a.attr.cap.flags & UCT_IFACE_FLAG_AM_SHORT)) {
        GTEST_SKIP() << "inner has no am_short";
    }
    size_t max = a.attr.cap.am.max_short;
    auto sizes = sizes_up_to(max);
    uint64_t seq = 0;
    std::vector<size_t> sent;
    for (size_t len : sizes) {
        if (len < sizeof(uint64_t)) {
            continue;
        }
        /* the header word and the rest split over three iov entries */
        auto payload = make_payload(seq, len - sizeof(uint64_t));
        size_t third = payload.size() / 3;
        uct_iov_t iov[4] = {};
        iov[0].buffer = &seq;                   iov[0].length = sizeof(seq);  iov[0].count = 1;
        iov[1].buffer = payload.data();         iov[1].length = third;        iov[1].count = 1;
        iov[2].buffer = payload.data() + third; iov[2].length = third;        iov[2].count = 1;
        iov[3].buffer = payload.data() + 2 * third;
        iov[3].length = payload.size() - 2 * third;
        iov[3].count  = 1;
        send_retrying([&] { return uct_ep_am_short_iov(ab, kAmId, iov, 4); });
        sent.push_back(payload.size());
        ++seq;
    }
    progress_until([&] { return b.received.size() == sent.size(); });
    for (size_t i = 0; i < sent.size(); ++i) {
        expect_message(b.received[i], i, sent[i]);
    }
}

TEST_F(uct_crypt_test, am_bcopy_every_size_content_checked)
{
    open_pair();
    size_t max = a.attr.cap.am.max_bcopy - sizeof(uint64_t);
    auto sizes = sizes_up_to(max);
    for (size_t i = 0; i < sizes.size(); ++i) {
        auto payload = make_payload(i, sizes[i]);
        bcopy_arg arg = {i, &payload};
        ssize_t packed;
        deadline limit(20);
        while (((packed = uct_ep_am_bcopy(ab, kAmId, pack_bcopy, &arg, 0)) ==
                UCS_ERR_NO_RESOURCE) && (!limit.passed())) {
            uct_worker_progress(worker);
        }
        ASSERT_EQ(packed, (ssize_t)(sizes[i] + sizeof(uint64_t)));
    }
    progress_until([&] { return b.received.size() == sizes.size(); });
    for (size_t i = 0; i < sizes.size(); ++i) {
        expect_message(b.received[i], i, sizes[i]);
    }
}

TEST_F(uct_crypt_test, am_zcopy_every_size_and_iov_count_content_checked)
{
    open_pair();
    size_t max = a.attr.cap.am.max_zcopy;
    std::vector<uint8_t> buffer(max + 64);
    uct_mem_h memh = UCT_MEM_HANDLE_NULL;
    ASSERT_EQ(uct_md_mem_reg(a.md, buffer.data(), buffer.size(), UCT_MD_MEM_ACCESS_ALL, &memh),
              UCS_OK);

    std::vector<std::pair<size_t, size_t>> sent; /* (header length, payload length) */
    uint64_t seq = 0;
    for (size_t len : sizes_up_to(max)) {
        for (size_t iovcnt : {(size_t)1, (size_t)3, (size_t)a.attr.cap.am.max_iov}) {
            /* the AM header (up to max_hdr) is the sequence word */
            auto payload = make_payload(seq, len);
            memcpy(buffer.data(), payload.data(), len);
            std::vector<uct_iov_t> iov(iovcnt);
            size_t off = 0;
            for (size_t k = 0; k < iovcnt; ++k) {
                size_t part = (k + 1 == iovcnt) ? len - off : len / iovcnt;
                iov[k].buffer = buffer.data() + off;
                iov[k].length = part;
                iov[k].memh   = memh;
                iov[k].count  = 1;
                off += part;
            }
            completion comp;
            comp.super.func   = completion_cb;
            comp.super.count  = 1;
            comp.super.status = UCS_OK;
            ucs_status_t status;
            deadline limit(20);
            while (((status = uct_ep_am_zcopy(ab, kAmId, &seq, sizeof(seq), iov.data(),
                                              iovcnt, 0, &comp.super)) ==
                    UCS_ERR_NO_RESOURCE) && (!limit.passed())) {
                uct_worker_progress(worker);
            }
            ASSERT_TRUE((status == UCS_OK) || (status == UCS_INPROGRESS))
                    << ucs_status_string(status);
            if (status == UCS_INPROGRESS) {
                /* the buffer is reused: wait until it may be */
                progress_until([&] { return comp.done != 0; });
                ASSERT_EQ(comp.status, UCS_OK);
            }
            sent.emplace_back(seq, len);
            ++seq;
        }
    }
    progress_until([&] { return b.received.size() == sent.size(); });
    for (size_t i = 0; i < sent.size(); ++i) {
        expect_message(b.received[i], sent[i].first, sent[i].second);
    }
    EXPECT_EQ(uct_md_mem_dereg(a.md, memh), UCS_OK);
}

TEST_F(uct_crypt_test, flush_completes_after_everything_is_delivered_both_ways)
{
    open_pair();
    const size_t count = 200, len = a.attr.cap.am.max_bcopy - sizeof(uint64_t);
    for (uct_ep_h ep : {ab, ba}) {
        for (size_t i = 0; i < count; ++i) {
            auto payload = make_payload(i, len);
            bcopy_arg arg = {i, &payload};
            ssize_t packed;
            while ((packed = uct_ep_am_bcopy(ep, kAmId, pack_bcopy, &arg, 0)) ==
                   UCS_ERR_NO_RESOURCE) {
                uct_worker_progress(worker);
            }
            ASSERT_GT(packed, 0);
        }
        flush(ep);
    }
    progress_until([&] { return a.received.size() == count && b.received.size() == count; });
    for (size_t i = 0; i < count; ++i) {
        expect_message(a.received[i], i, len);
        expect_message(b.received[i], i, len);
    }
}

TEST_F(uct_crypt_test, fence_keeps_order)
{
    open_pair();
    for (uint64_t i = 0; i < 100; ++i) {
        auto payload = make_payload(i, 16);
        send_retrying([&] { return uct_ep_am_short(ab, kAmId, i, payload.data(), 16); });
        ASSERT_EQ(uct_ep_fence(ab, 0), UCS_OK);
    }
    ASSERT_EQ(uct_iface_fence(a.iface, 0), UCS_OK);
    progress_until([&] { return b.received.size() == 100; });
    for (uint64_t i = 0; i < 100; ++i) {
        expect_message(b.received[i], i, 16);
    }
}

namespace {
struct pending_sender {
    uct_pending_req_t     super;
    uct_ep_h              ep;
    std::vector<uint8_t> *payload;
    uint64_t              seq;
    int                   sent = 0;
};

ucs_status_t pending_send(uct_pending_req_t *self)
{
    pending_sender *p = ucs_container_of(self, pending_sender, super);
    bcopy_arg arg = {p->seq, p->payload};
    ssize_t packed = uct_ep_am_bcopy(p->ep, kAmId, pack_bcopy, &arg, 0);
    if (packed == UCS_ERR_NO_RESOURCE) {
        return UCS_ERR_NO_RESOURCE; /* stays queued */
    }
    p->sent = packed > 0;
    return UCS_OK;
}
} // namespace

TEST_F(uct_crypt_test, pending_queue_resumes_after_no_resource)
{
    open_pair();
    const size_t len = a.attr.cap.am.max_bcopy - sizeof(uint64_t);
    std::vector<uint8_t> payloads[2];
    uint64_t seq = 0;
    ssize_t packed = 0;

    /* fill the inner's send path without progressing the receiver */
    for (; seq < 100000; ++seq) {
        auto payload = make_payload(seq, len);
        bcopy_arg arg = {seq, &payload};
        packed = uct_ep_am_bcopy(ab, kAmId, pack_bcopy, &arg, 0);
        if (packed == UCS_ERR_NO_RESOURCE) {
            break;
        }
        ASSERT_EQ(packed, (ssize_t)(len + sizeof(uint64_t)));
    }
    ASSERT_EQ(packed, UCS_ERR_NO_RESOURCE) << "the inner never ran out of room";
    uint64_t refused = seq;

    /* the refused message and one more go through the pending queue */
    std::vector<std::unique_ptr<pending_sender>> pending;
    for (int k = 0; k < 2; ++k) {
        payloads[k] = make_payload(refused + k, len);
        pending.emplace_back(new pending_sender);
        pending.back()->super.func = pending_send;
        pending.back()->ep         = ab;
        pending.back()->payload    = &payloads[k];
        pending.back()->seq        = refused + k;
        ucs_status_t status = uct_ep_pending_add(ab, &pending.back()->super, 0);
        if (status == UCS_ERR_BUSY) {
            /* resources came back meanwhile: UCT says send now */
            ASSERT_EQ(pending_send(&pending.back()->super), UCS_OK);
        } else {
            ASSERT_EQ(status, UCS_OK);
        }
    }
    progress_until([&] { return pending[0]->sent && pending[1]->sent; });
    progress_until([&] { return b.received.size() == refused + 2; });
    for (uint64_t i = 0; i < refused + 2; ++i) {
        expect_message(b.received[i], i, len);
    }
}

TEST_F(uct_crypt_test, tampered_record_fails_the_endpoint_and_is_never_delivered)
{
    /* a's iface flips a ciphertext bit in its 6th record */
    open_side(a, "flip_ciphertext", "5");
    open_side(b);
    ab = connect(a, b);
    ba = connect(b, a);

    for (uint64_t i = 0; i < 10; ++i) {
        auto payload = make_payload(i, 64);
        send_retrying([&] { return uct_ep_am_short(ab, kAmId, i, payload.data(), 64); });
    }
    progress_until([&] { return !b.failed_eps.empty(); });
    /* let anything still in flight arrive: none of it may be delivered */
    for (int i = 0; i < 10000; ++i) {
        uct_worker_progress(worker);
    }
    ASSERT_EQ(b.failed_eps.size(), 1u);
    EXPECT_EQ(b.failed_eps[0], ba) << "the endpoint to the tampering peer failed";
    ASSERT_EQ(b.received.size(), 5u) << "only the records before the forged one";
    for (uint64_t i = 0; i < 5; ++i) {
        expect_message(b.received[i], i, 64);
    }
}
