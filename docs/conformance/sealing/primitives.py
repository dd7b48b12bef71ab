"""AES-256-GCM (NIST SP 800-38D) and HKDF-SHA256 (RFC 5869) with the Python standard library only: slow, and
not constant-time — for conformance vectors and the interop participant, never for production secrets."""
import hashlib
import hmac

_SBOX = []


def _sbox():
    # The AES S-box from its definition: the multiplicative inverse in GF(2^8) (from the powers of the
    # generator 3), then the affine map.
    if _SBOX:
        return _SBOX
    exp, log, x = [0] * 255, [0] * 256, 1
    for power in range(255):
        exp[power], log[x] = x, power
        x ^= ((x << 1) ^ 0x11B) if x & 0x80 else x << 1  # x * 3
    for a in range(256):
        inverse = exp[(255 - log[a]) % 255] if a else 0
        s = inverse
        for shift in range(1, 5):
            s ^= ((inverse << shift) | (inverse >> (8 - shift))) & 0xFF
        _SBOX.append(s ^ 0x63)
    return _SBOX


def _xtime(a):
    return ((a << 1) ^ 0x1B) & 0xFF if a & 0x80 else a << 1


def _expand(key):
    sbox = _sbox()
    words = [list(key[i:i + 4]) for i in range(0, 32, 4)]
    rcon = 1
    for i in range(8, 60):
        t = list(words[i - 1])
        if i % 8 == 0:
            t = [sbox[b] for b in t[1:] + t[:1]]
            t[0] ^= rcon
            rcon = _xtime(rcon)
        elif i % 8 == 4:
            t = [sbox[b] for b in t]
        words.append([a ^ b for a, b in zip(words[i - 8], t)])
    return [sum(words[4 * r:4 * r + 4], []) for r in range(15)]


def _encrypt_block(rounds, block):
    sbox = _sbox()
    s = [a ^ b for a, b in zip(block, rounds[0])]
    for r in range(1, 15):
        s = [sbox[b] for b in s]
        s = [s[(i + 4 * (i % 4)) % 16] for i in range(16)]  # ShiftRows (column-major state)
        if r < 14:
            mixed = []
            for c in range(4):
                a = s[4 * c:4 * c + 4]
                t = a[0] ^ a[1] ^ a[2] ^ a[3]
                mixed += [a[i] ^ t ^ _xtime(a[i] ^ a[(i + 1) % 4]) for i in range(4)]
            s = mixed
        s = [a ^ b for a, b in zip(s, rounds[r])]
    return bytes(s)


def _ghash(h, aad, ciphertext):
    def blocks(data):
        data = data + bytes(-len(data) % 16)
        return [int.from_bytes(data[i:i + 16], "big") for i in range(0, len(data), 16)]
    def mul(x, y):
        z, v = 0, y
        for i in range(127, -1, -1):
            if (x >> i) & 1:
                z ^= v
            v = (v >> 1) ^ (0xE1 << 120) if v & 1 else v >> 1
        return z
    y = 0
    lengths = ((len(aad) * 8) << 64) | (len(ciphertext) * 8)
    for block in blocks(aad) + blocks(ciphertext) + [lengths]:
        y = mul(y ^ block, h)
    return y


def _gcm(key, nonce, aad, data, decrypt):
    rounds = _expand(key)
    h = int.from_bytes(_encrypt_block(rounds, bytes(16)), "big")
    j0 = nonce + b"\x00\x00\x00\x01"
    out = bytearray()
    for i in range(0, len(data), 16):
        counter = nonce + (2 + i // 16).to_bytes(4, "big")
        stream = _encrypt_block(rounds, counter)
        out += bytes(a ^ b for a, b in zip(data[i:i + 16], stream))
    ciphertext = data if decrypt else bytes(out)
    tag = (_ghash(h, aad, ciphertext) ^ int.from_bytes(_encrypt_block(rounds, j0), "big")).to_bytes(16, "big")
    return bytes(out), tag


def seal(key, nonce, aad, plaintext):
    """AES-256-GCM: ciphertext ‖ 16-byte tag."""
    ciphertext, tag = _gcm(key, nonce, aad, plaintext, decrypt=False)
    return ciphertext + tag


def open_sealed(key, nonce, aad, sealed):
    """The plaintext, or None when the tag does not match."""
    if len(sealed) < 16:
        return None
    plaintext, tag = _gcm(key, nonce, aad, sealed[:-16], decrypt=True)
    return plaintext if hmac.compare_digest(tag, sealed[-16:]) else None


def hkdf_sha256(ikm, salt, info, length=32):
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    out, block = b"", b""
    for counter in range(1, -(-length // 32) + 1):
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        out += block
    return out[:length]
