"""A reference reader of cairn's pack files (format 2), for the tests.

It parses the bytes on disk exactly as storage/pack/pack.h documents them and
shares no code with the daemon, so a test that looks at the packs through it
checks the daemon against the documented format, not against itself:

  pack    := header record* [index trailer]
  header  := "cRnPACK1" | seq u64                                  16 bytes
  record  := type u8 | flags u8 (0) | reserved u16 (0) | length u32
             | crc u32 | id [32] | payload [length]                44 + length
             crc: CRC-32C of the header's first 8 bytes, the id, the payload
  index   := entry*, 56 bytes each:
             type u8 | 0 u8 | 0 u16 | record_len u32 | record_off u64
             | sub_off u32 | raw_size u32 | id [32]
  trailer := index_off u64 | count u32 | index_crc u32 | seq u64 | "cRnPIDX1"

  block payload := count u32 | count x (chunk id [32] | size u32) | body
  body, segment and journal payloads: the object envelope of
  compress/compress.h: "cRnO" | version u8 (1) | algo u8 (0 raw, 1 zstd)
  | reserved u16 | raw size u64, then the raw bytes or one zstd frame.

All integers are big-endian. Standard library only; zstd bodies are decoded
by the `zstd` command (Debian package zstd), and only when a test asks.

Contents:
  crc32c(data, crc=0)        table-driven CRC-32C (Castagnoli)
  read_pack(path)            a Pack: header, records, index, torn tail
  list_packs / read_packs    every pack of a data directory
  parse_block / envelope     block tables and envelope headers
  decode_envelope / block_raw / chunk_bytes   decoded bytes
  chunk_records / find_chunk  chunk id -> the pack, block record and offset
                             holding it
  record_file_offsets        where a record's parts sit in the pack file
  xor_byte / fix_record_crc  damage on disk; fix_record_crc rewrites a
                             record's checksum (to forge damage that only
                             the deeper checks can find)
  db_rows / StoreCheck       the packs against cairn.db's rows (read-only)
"""

import hashlib
import os
import struct
import subprocess

PACK_MAGIC = b"cRnPACK1"
INDEX_MAGIC = b"cRnPIDX1"
HEADER_SIZE = 16
RECORD_HEADER = 44
INDEX_ENTRY = 56
TRAILER_SIZE = 32
MAX_PAYLOAD = 4 * 1024 * 1024
MAX_BLOCK_CHUNKS = 16384
BLOCK_ENTRY = 36
ID_LEN = 32

REC_BLOCK, REC_MANIFEST, REC_ENTRY = 1, 2, 3
IDX_CHUNK, IDX_MANIFEST, IDX_ENTRY = 1, 2, 3
REC_NAMES = {REC_BLOCK: "block", REC_MANIFEST: "manifest", REC_ENTRY: "entry"}

ENVELOPE_MAGIC = b"cRnO"
ENVELOPE_HEADER = 16
ENVELOPE_VERSION = 1
ALGO_RAW, ALGO_ZSTD = 0, 1

MANIFEST_ENTRY = 40
MANIFEST_SEGMENT_HEADER = 8


class PackFormatError(ValueError):
    pass


# --------------------------------------------------------------------------
# CRC-32C
# --------------------------------------------------------------------------


def _crc_table():
    poly = 0x82F63B78  # Castagnoli, reflected
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_CRC_TABLE = _crc_table()


def crc32c(data, crc=0):
    """CRC-32C of `data`, continuing `crc` (start with 0), like pack_crc32c()."""
    table = _CRC_TABLE
    c = crc ^ 0xFFFFFFFF
    for b in bytes(data):
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283, "CRC-32C check value"


# --------------------------------------------------------------------------
# records
# --------------------------------------------------------------------------


class Record:
    """One record of a pack. `offset` is where its header starts in the
    file; `payload` is a memoryview of its payload bytes."""

    def __init__(self, offset, rtype, flags, reserved, length, crc, rid, payload, crc_ok):
        self.offset = offset
        self.type = rtype
        self.flags = flags
        self.reserved = reserved
        self.length = length
        self.crc = crc
        self.id = rid
        self.payload = payload
        self.crc_ok = crc_ok
        self._block = None

    def block(self):
        """parse_block() of a block record's payload, parsed once."""
        if self._block is None:
            self._block = parse_block(self.payload)
        return self._block

    @property
    def total_len(self):
        return RECORD_HEADER + self.length

    @property
    def end(self):
        return self.offset + self.total_len

    @property
    def id_hex(self):
        return self.id.hex()

    def __repr__(self):
        return "Record(%s at %d, %d bytes, id %s%s)" % (
            REC_NAMES.get(self.type, self.type), self.offset, self.total_len, self.id_hex[:12],
            "" if self.crc_ok else ", BAD CRC")


def record_crc(header8, rid, payload):
    return crc32c(payload, crc32c(rid, crc32c(header8)))


def parse_record(buf, off, check_crc=True):
    """The record at buf[off:]. Returns (Record, None), or (None, why) when
    it is torn ("truncated") or not a record ("corrupt: ...")."""
    if len(buf) - off < RECORD_HEADER:
        return None, "truncated"
    rtype, flags, reserved, length, crc = struct.unpack_from(">BBHII", buf, off)
    if rtype not in REC_NAMES or flags != 0 or reserved != 0 or length > MAX_PAYLOAD:
        return None, "corrupt: bad header (type %d, flags %d, reserved %d, length %d)" % (
            rtype, flags, reserved, length)
    if len(buf) - off - RECORD_HEADER < length:
        return None, "truncated"
    mv = memoryview(buf)
    rid = bytes(mv[off + 12:off + 44])
    payload = mv[off + RECORD_HEADER:off + RECORD_HEADER + length]
    crc_ok = None
    if check_crc:
        crc_ok = record_crc(mv[off:off + 8], rid, payload) == crc
        if not crc_ok:
            return None, "corrupt: checksum"
    return Record(off, rtype, flags, reserved, length, crc, rid, payload, crc_ok), None


# --------------------------------------------------------------------------
# index and trailer
# --------------------------------------------------------------------------


class IndexEntry:
    def __init__(self, etype, record_len, record_off, sub_off, raw_size, eid):
        self.type = etype
        self.record_len = record_len
        self.record_off = record_off
        self.sub_off = sub_off
        self.raw_size = raw_size
        self.id = eid

    def key(self):
        return (self.type, self.record_len, self.record_off, self.sub_off, self.raw_size, self.id)

    def __eq__(self, other):
        return isinstance(other, IndexEntry) and self.key() == other.key()

    def __repr__(self):
        return "IndexEntry(type %d, record %d+%d, sub %d, raw %d, id %s)" % (
            self.type, self.record_off, self.record_len, self.sub_off, self.raw_size,
            self.id.hex()[:12])


def parse_trailer(buf):
    """(index_off, count, index_crc, seq) from a pack's last 32 bytes, or None
    when the magic or the sizes do not describe an index of this pack."""
    size = len(buf)
    if size < HEADER_SIZE + TRAILER_SIZE:
        return None
    index_off, count, index_crc, seq, magic = struct.unpack_from(">QIIQ8s", buf, size - TRAILER_SIZE)
    if magic != INDEX_MAGIC:
        return None
    if index_off < HEADER_SIZE or index_off + count * INDEX_ENTRY + TRAILER_SIZE != size:
        return None
    return index_off, count, index_crc, seq


def parse_index(buf, index_off, count):
    out = []
    for i in range(count):
        p = index_off + i * INDEX_ENTRY
        etype, pad, reserved, rlen, roff, sub, raw = struct.unpack_from(">BBHIQII", buf, p)
        eid = bytes(buf[p + 24:p + 56])
        if etype not in (IDX_CHUNK, IDX_MANIFEST, IDX_ENTRY) or pad or reserved:
            raise PackFormatError("index entry %d: bad type/padding" % i)
        if rlen < RECORD_HEADER or roff < HEADER_SIZE or roff + rlen > index_off:
            raise PackFormatError("index entry %d points outside the record area" % i)
        if (etype == IDX_CHUNK and raw == 0) or (etype != IDX_CHUNK and sub != 0):
            raise PackFormatError("index entry %d: bad sub_off/raw_size" % i)
        out.append(IndexEntry(etype, rlen, roff, sub, raw, eid))
    return out


# --------------------------------------------------------------------------
# packs
# --------------------------------------------------------------------------


class Pack:
    """A parsed pack file.

    records    the intact records, in file order
    sealed     a valid index and trailer end the file
    index      the index entries (sealed packs), else None
    valid_end  where the intact records end (the index, or a torn tail, or
               the end of the file starts there)
    tail       why the scan stopped before the end of an unsealed pack
               (None when it reached the end)
    """

    def __init__(self, path, data, check_crc=True):
        self.path = path
        self.size = len(data)
        self.data = data
        if len(data) < HEADER_SIZE or data[:8] != PACK_MAGIC:
            raise PackFormatError("%s: no pack header" % path)
        # hseq: the seq its header and trailer carry; seq: its number in the
        # database once read_packs() knows it (the header's until then)
        (self.hseq,) = struct.unpack_from(">Q", data, 8)
        self.seq = self.hseq
        self.records = []
        self.index = None
        self.tail = None
        self.sealed = False
        trailer = parse_trailer(data)
        limit = self.size
        if trailer is not None and trailer[3] == self.hseq:
            index_off, count, index_crc, _ = trailer
            ibytes = memoryview(data)[index_off:index_off + count * INDEX_ENTRY]
            if crc32c(ibytes) == index_crc:
                self.index = parse_index(data, index_off, count)
                self.sealed = True
                limit = index_off
        off = HEADER_SIZE
        view = memoryview(data)[:limit]
        while off < limit:
            rec, why = parse_record(view, off, check_crc)
            if rec is None:
                self.tail = why
                break
            self.records.append(rec)
            off = rec.end
        self.valid_end = off
        self.by_offset = {r.offset: r for r in self.records}
        if self.sealed and off != limit:
            raise PackFormatError("%s: sealed, but its records end at %d, not at the index (%d): %s"
                                  % (path, off, limit, self.tail))

    def record_at(self, offset):
        try:
            return self.by_offset[offset]
        except KeyError:
            raise KeyError("%s has no record at offset %d" % (self.path, offset)) from None

    def expected_index(self):
        """The index entries its records call for (what the daemon writes when
        it seals the pack), in record order."""
        out = []
        for rec in self.records:
            if rec.type == REC_BLOCK:
                chunks, _ = rec.block()
                for cid, size, sub in chunks:
                    out.append(IndexEntry(IDX_CHUNK, rec.total_len, rec.offset, sub, size, cid))
            else:
                hdr = parse_envelope_header(rec.payload)
                etype = IDX_MANIFEST if rec.type == REC_MANIFEST else IDX_ENTRY
                out.append(IndexEntry(etype, rec.total_len, rec.offset, 0, hdr["raw_size"], rec.id))
        return out

    def __repr__(self):
        return "Pack(%s, seq %d, %d bytes, %d records, %s)" % (
            os.path.basename(self.path), self.seq, self.size, len(self.records),
            "sealed" if self.sealed else "open")


def pack_dir(data_dir):
    return os.path.join(data_dir, "objects", "packs")


SEQ_BITS = 48  # a pack's number in the database: its writer's index above its seq


def _hex16(s):
    return len(s) == 16 and all(c in "0123456789abcdef" for c in s)


def parse_pack_name(name):
    """(writer, seq) of a pack's name (the key after "packs/"): "<seq>" for
    writer 0, "<writer>-<seq>" for the others (storage/pack/pack.h); None
    for anything else."""
    if _hex16(name):
        return 0, int(name, 16)
    if len(name) == 33 and name[16] == "-" and _hex16(name[:16]) and _hex16(name[17:]):
        return int(name[:16], 16), int(name[17:], 16)
    return None


def pack_name(writer, seq):
    return "%016x" % seq if writer == 0 else "%016x-%016x" % (writer, seq)


def writer_indexes(data_dir):
    """{writer id: index} from the database's writers table (writer 0 is 0)."""
    import sqlite3

    out = {0: 0}
    path = os.path.join(data_dir, "cairn.db")
    if not os.path.exists(path):
        return out
    db = sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=30)
    try:
        for idx, wid in db.execute("SELECT idx, id FROM writers"):
            out[wid & (2**64 - 1)] = idx
    except sqlite3.OperationalError:
        pass  # a database of an older format
    finally:
        db.close()
    return out


def pack_number(writer, seq, indexes):
    """A pack's number as the database has it, from {writer id: index}; a
    writer the database does not know gets an index past all it knows."""
    if writer not in indexes:
        indexes[writer] = max(indexes.values()) + 1
    return (indexes[writer] << SEQ_BITS) | seq


def own_writer(data_dir):
    """This data directory's writer id (DATA_DIR/writer)."""
    with open(os.path.join(data_dir, "writer")) as f:
        return int(f.readline(), 16)


def list_packs(data_dir):
    """[(number, path)] of every pack file of a data directory, by the
    number the database gives it."""
    d = pack_dir(data_dir)
    out = []
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return []
    indexes = writer_indexes(data_dir)
    for name in sorted(names):
        parsed = parse_pack_name(name)
        if parsed is not None:
            out.append((pack_number(parsed[0], parsed[1], indexes), os.path.join(d, name)))
    return sorted(out)


def pack_bytes(data_dir):
    """Total size of the pack files on disk."""
    return sum(os.path.getsize(p) for _, p in list_packs(data_dir))


def read_pack(path, check_crc=True):
    with open(path, "rb") as f:
        data = f.read()
    return Pack(path, data, check_crc)


def read_packs(data_dir, check_crc=True):
    """The packs of a data directory, each with .seq its number in the database."""
    out = []
    for number, path in list_packs(data_dir):
        pack = read_pack(path, check_crc)
        pack.seq = number
        out.append(pack)
    return out


def read_record_at(path, offset, check_crc=True):
    """The record at `offset` of a pack file, whatever lies before it."""
    with open(path, "rb") as f:
        data = f.read()
    rec, why = parse_record(data, offset, check_crc)
    if rec is None:
        raise PackFormatError("%s: no record at %d: %s" % (path, offset, why))
    return rec


# --------------------------------------------------------------------------
# payloads
# --------------------------------------------------------------------------


def parse_block(payload):
    """([(chunk id bytes, size, sub_off)], body_off) of a block payload."""
    if len(payload) < 4:
        raise PackFormatError("block payload shorter than its count")
    (n,) = struct.unpack_from(">I", payload, 0)
    if n == 0 or n > MAX_BLOCK_CHUNKS or 4 + n * BLOCK_ENTRY > len(payload):
        raise PackFormatError("block table of %d chunks does not fit %d bytes" % (n, len(payload)))
    chunks = []
    sub = 0
    for i in range(n):
        p = 4 + i * BLOCK_ENTRY
        cid = bytes(payload[p:p + ID_LEN])
        (size,) = struct.unpack_from(">I", payload, p + ID_LEN)
        if size == 0:
            raise PackFormatError("block chunk %d has size 0" % i)
        chunks.append((cid, size, sub))
        sub += size
    return chunks, 4 + n * BLOCK_ENTRY


def block_id(payload):
    """A block record's id: the SHA-256 of its table (count and entries)."""
    _, body_off = parse_block(payload)
    return hashlib.sha256(payload[:body_off]).digest()


def parse_envelope_header(obj):
    """{magic, version, algo, reserved, raw_size} of an envelope (compress.h)."""
    if len(obj) < ENVELOPE_HEADER:
        raise PackFormatError("envelope shorter than its header")
    magic, version, algo, reserved, raw = struct.unpack_from(">4sBBHQ", obj, 0)
    return {"magic": magic, "version": version, "algo": algo, "reserved": reserved,
            "raw_size": raw}


def block_body(rec):
    """The envelope (body) of a block record, as a memoryview."""
    _, body_off = parse_block(rec.payload)
    return rec.payload[body_off:]


def block_envelope(rec):
    return parse_envelope_header(block_body(rec))


def zstd_decompress(frame, timeout=120):
    """Decodes one zstd frame with the `zstd` command."""
    try:
        p = subprocess.run(["zstd", "-d", "-q", "-c"], input=bytes(frame), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout)
    except FileNotFoundError:
        raise AssertionError("the zstd command is missing (Debian package zstd; scripts/check "
                             "installs it)")
    if p.returncode != 0:
        raise PackFormatError("zstd -d failed: %s" % p.stderr.decode("utf-8", "replace")[-500:])
    return p.stdout


def decode_envelope(obj):
    """The raw bytes of an envelope: a raw body as it is, a zstd body
    through `zstd -d`. Checks the header and the raw size."""
    hdr = parse_envelope_header(obj)
    if hdr["magic"] != ENVELOPE_MAGIC or hdr["version"] != ENVELOPE_VERSION or hdr["reserved"]:
        raise PackFormatError("bad envelope header %r" % hdr)
    body = obj[ENVELOPE_HEADER:]
    if hdr["algo"] == ALGO_RAW:
        raw = bytes(body)
    elif hdr["algo"] == ALGO_ZSTD:
        raw = zstd_decompress(body)
    else:
        raise PackFormatError("unknown algorithm %d" % hdr["algo"])
    if len(raw) != hdr["raw_size"]:
        raise PackFormatError("envelope says %d raw bytes, body holds %d" % (hdr["raw_size"], len(raw)))
    return raw


def block_raw(rec):
    """The raw bytes of a block record (its chunks concatenated)."""
    chunks, body_off = parse_block(rec.payload)
    raw = decode_envelope(rec.payload[body_off:])
    if len(raw) != sum(size for _, size, _ in chunks):
        raise PackFormatError("block body holds %d raw bytes, its table %d"
                              % (len(raw), sum(s for _, s, _ in chunks)))
    return raw


def chunk_bytes(rec, chunk_id):
    """The bytes of one chunk of a block record (chunk_id: bytes or hex)."""
    if isinstance(chunk_id, str):
        chunk_id = bytes.fromhex(chunk_id)
    chunks, _ = parse_block(rec.payload)
    raw = block_raw(rec)
    for cid, size, sub in chunks:
        if cid == chunk_id:
            return raw[sub:sub + size]
    raise KeyError("chunk %s is not in %r" % (chunk_id.hex(), rec))


def seal_raw(rec):
    """The raw bytes of a manifest segment or journal entry record."""
    return decode_envelope(rec.payload)


def parse_segment(raw):
    """(level, [(hash bytes, byte count)]) of a manifest segment's raw bytes."""
    level, pad, reserved, count = struct.unpack_from(">BBHI", raw, 0)
    if pad or reserved or len(raw) != MANIFEST_SEGMENT_HEADER + count * MANIFEST_ENTRY:
        raise PackFormatError("bad manifest segment (%d entries, %d bytes)" % (count, len(raw)))
    out = []
    for i in range(count):
        p = MANIFEST_SEGMENT_HEADER + i * MANIFEST_ENTRY
        out.append((bytes(raw[p:p + 32]), struct.unpack_from(">Q", raw, p + 32)[0]))
    return level, out


def parse_entry(rec):
    """A journal entry record's msgpack map (daemon/format/objects.h)."""
    import cairntest  # the msgpack decoder

    return cairntest.unpackb(seal_raw(rec))


# --------------------------------------------------------------------------
# where things are
# --------------------------------------------------------------------------


class ChunkPlace:
    """One stored copy of a chunk: the pack, the block record, and where the
    chunk lies in the block's raw bytes."""

    def __init__(self, pack, rec, sub_off, size, index_in_block):
        self.pack = pack
        self.rec = rec
        self.sub_off = sub_off
        self.size = size
        self.index_in_block = index_in_block

    def __repr__(self):
        return "ChunkPlace(%s offset %d, sub %d, %d bytes)" % (
            os.path.basename(self.pack.path), self.rec.offset, self.sub_off, self.size)


def chunk_records(packs):
    """{chunk id hex: [ChunkPlace]} for every chunk in every block record."""
    out = {}
    for pack in packs:
        for rec in pack.records:
            if rec.type != REC_BLOCK:
                continue
            chunks, _ = rec.block()
            for i, (cid, size, sub) in enumerate(chunks):
                out.setdefault(cid.hex(), []).append(ChunkPlace(pack, rec, sub, size, i))
    return out


def records_of_type(packs, rtype):
    return [(pack, rec) for pack in packs for rec in pack.records if rec.type == rtype]


def find_chunk(data_dir, chunk_id):
    """[ChunkPlace] of every stored copy of one chunk (id bytes or hex)."""
    if isinstance(chunk_id, bytes):
        chunk_id = chunk_id.hex()
    return chunk_records(read_packs(data_dir, check_crc=False)).get(chunk_id, [])


def record_file_offsets(rec):
    """Offsets in the pack file of a record's parts: header, payload, and for
    a block its body (envelope) and the first raw byte of a raw body."""
    out = {"header": rec.offset, "crc": rec.offset + 8, "id": rec.offset + 12,
           "payload": rec.offset + RECORD_HEADER}
    if rec.type == REC_BLOCK:
        _, body_off = parse_block(rec.payload)
        out["body"] = out["payload"] + body_off
        out["raw"] = out["body"] + ENVELOPE_HEADER
    return out


def stored_share(rec):
    """{chunk id hex: share of the record's bytes} the way the daemon counts
    a chunk's stored bytes: record length * chunk size // block raw size, at least 1."""
    if getattr(rec, "_shares", None) is None:
        chunks, _ = rec.block()
        total = sum(size for _, size, _ in chunks) or 1
        # At least 1: a live chunk always counts as live bytes.
        rec._shares = {cid.hex(): max(1, rec.total_len * size // total) for cid, size, _ in chunks}
    return rec._shares


# --------------------------------------------------------------------------
# changing packs on disk (damage for tests)
# --------------------------------------------------------------------------


def xor_byte(path, offset, mask=0x40):
    """Flips bits of one byte of a file in place (the same inode, so a
    daemon's open descriptors see it)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        if len(b) != 1:
            raise ValueError("%s has no byte at %d" % (path, offset))
        f.seek(offset)
        f.write(bytes([b[0] ^ mask]))


def write_at(path, offset, data):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def fix_record_crc(path, offset):
    """Recomputes the checksum of the record at `offset` of a pack file and
    writes it, so the record passes the CRC check whatever its payload
    holds now. Returns the new checksum."""
    with open(path, "r+b") as f:
        f.seek(offset)
        hdr = f.read(RECORD_HEADER)
        (length,) = struct.unpack_from(">I", hdr, 4)
        payload = f.read(length)
        if len(hdr) != RECORD_HEADER or len(payload) != length:
            raise ValueError("%s: no whole record at %d" % (path, offset))
        crc = record_crc(hdr[:8], hdr[12:44], payload)
        f.seek(offset + 8)
        f.write(struct.pack(">I", crc))
    return crc


# --------------------------------------------------------------------------
# the packs against the database (cairn.db, read-only)
# --------------------------------------------------------------------------

PACK_OPEN, PACK_SEALED, PACK_DELETING = 0, 1, 2


def db_rows(data_dir):
    """The rows of cairn.db that say where records are, read through a
    read-only connection (WAL mode lets it read beside a running daemon):
    {"packs": {seq: (size, state)},
     "chunks": {hex: (pack, off, len, sub, size, stored, condemned)},
     "segments": {hex: (pack, off, len, size, condemned)},
     "journal": {hex: (pack, off, len, doc hex, time ns, op)}}"""
    import sqlite3

    path = os.path.join(data_dir, "cairn.db")
    db = sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=30)
    try:
        db.execute("BEGIN")  # one snapshot for every table
        out = {"packs": {seq: (size, state)
                         for seq, size, state in db.execute("SELECT seq, size, state FROM packs")},
               "chunks": {bytes(h).hex(): tuple(rest) for h, *rest in db.execute(
                   "SELECT hash, pack, off, len, sub, size, stored, condemned FROM chunks")},
               "segments": {bytes(h).hex(): tuple(rest) for h, *rest in db.execute(
                   "SELECT hash, pack, off, len, size, condemned FROM segments")},
               "journal": {bytes(h).hex(): (p, o, n, bytes(doc).hex(), t, op) for h, p, o, n, doc, t, op
                           in db.execute("SELECT hash, pack, off, len, doc, time, op FROM journal")}}
        db.execute("COMMIT")
        return out
    finally:
        db.close()


class StoreCheck:
    """The packs on disk checked against the database's rows.

    problems   what does not agree (empty when all is well):
               - a pack row without its file, a pack file without a row, a
                 file whose size is not the row's
               - a chunk, segment or journal row that does not name an
                 intact record holding that id at that place, or a chunk
                 row whose stored share is not the one its record gives
    dead       chunk copies, segments and journal entries on disk that no
               row names (dead weight gc may reclaim)
    copies     {chunk hex: [ChunkPlace]} of every chunk copy on disk
    rows       db_rows()
    packs      the parsed packs
    """

    def __init__(self, data_dir, check_crc=True):
        self.rows = rows = db_rows(data_dir)
        self.packs = read_packs(data_dir, check_crc)
        self.problems = problems = []
        self.dead = []
        by_seq = {p.seq: p for p in self.packs}
        for seq, (size, state) in sorted(rows["packs"].items()):
            pack = by_seq.get(seq)
            if pack is None:
                if state != PACK_DELETING:
                    problems.append("pack %016x (state %d) has a row but no file" % (seq, state))
                continue
            if pack.size != size:
                problems.append("pack %016x: file has %d bytes, its row says %d (state %d)"
                                % (seq, pack.size, size, state))
            if state == PACK_SEALED and not pack.sealed:
                problems.append("pack %016x: row says sealed, the file has no valid index" % seq)
            if pack.sealed:
                want = pack.expected_index()
                if pack.index != want:
                    problems.append("pack %016x: its index does not list its records" % seq)
            if pack.tail is not None:
                problems.append("pack %016x: records stop at %d of %d: %s"
                                % (seq, pack.valid_end, pack.size, pack.tail))
        for pack in self.packs:
            if pack.seq not in rows["packs"]:
                problems.append("pack file %s has no row (%d bytes leaked)" % (pack.path, pack.size))
        self.copies = chunk_records(self.packs)
        named = set()

        def record(seq, off, length, rtype, what):
            pack = by_seq.get(seq)
            if pack is None:
                problems.append("%s: pack %016x is missing" % (what, seq))
                return None
            try:
                rec = pack.record_at(off)
            except KeyError:
                problems.append("%s: no intact record at pack %016x offset %d" % (what, seq, off))
                return None
            if rec.total_len != length or rec.type != rtype:
                problems.append("%s: the record at pack %016x offset %d is a %s of %d bytes, the row "
                                "says a %s of %d" % (what, seq, off, REC_NAMES.get(rec.type), rec.total_len,
                                                     REC_NAMES[rtype], length))
                return None
            return rec

        for h, (seq, off, length, sub, size, stored, condemned) in rows["chunks"].items():
            what = "chunk %s" % h
            rec = record(seq, off, length, REC_BLOCK, what)
            if rec is None:
                continue
            if getattr(rec, "_by_sub", None) is None:
                rec._by_sub = {(cid.hex(), so): s for cid, s, so in rec.block()[0]}
            if rec._by_sub.get((h, sub)) != size:
                problems.append("%s: not in the block at pack %016x offset %d at sub %d with size %d"
                                % (what, seq, off, sub, size))
                continue
            share = stored_share(rec)[h]
            if stored != share:
                problems.append("%s: stored %d, its record gives a share of %d" % (what, stored, share))
            named.add((seq, off, h))
        for h, (seq, off, length, size, condemned) in rows["segments"].items():
            if record(seq, off, length, REC_MANIFEST, "segment %s" % h) is not None:
                if by_seq[seq].record_at(off).id_hex != h:
                    problems.append("segment %s: the record at its place has another id" % h)
                named.add((seq, off, h))
        for h, (seq, off, length, doc, t, op) in rows["journal"].items():
            if record(seq, off, length, REC_ENTRY, "journal entry %s" % h) is not None:
                if by_seq[seq].record_at(off).id_hex != h:
                    problems.append("journal entry %s: the record at its place has another id" % h)
                named.add((seq, off, h))
        for pack in self.packs:
            for rec in pack.records:
                if rec.type == REC_BLOCK:
                    for cid, size, sub in rec.block()[0]:
                        if (pack.seq, rec.offset, cid.hex()) not in named:
                            self.dead.append(("chunk", pack.seq, rec.offset, cid.hex(), size))
                elif (pack.seq, rec.offset, rec.id_hex) not in named:
                    self.dead.append((REC_NAMES[rec.type], pack.seq, rec.offset, rec.id_hex,
                                      rec.total_len))

    def pack_bytes(self):
        return sum(p.size for p in self.packs)

    def dead_chunks(self):
        return [d for d in self.dead if d[0] == "chunk"]
