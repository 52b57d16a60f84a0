// A simple face driven only by the outgoing weights, head pose and gaze: what the avatar will get.
// The face looks at the viewer as the camera sees the subject: the subject's left eye is on the viewer's right.
"use strict";

function drawAvatar(canvas, names, face) {
  const g = canvas.getContext("2d");
  const W = canvas.width, H = canvas.height;
  g.clearRect(0, 0, W, H);
  if (!face) return;
  const w = {};
  names.forEach((n, i) => { w[n] = face.blendshapes ? face.blendshapes[i] : 0; });
  const [yaw, pitch, roll] = face.head_rotation || [0, 0, 0];
  const rad = Math.PI / 180;
  g.save();
  // head pose: roll turns the face (tilt toward the subject's left shoulder = viewer's right), yaw and pitch
  // slide the features across the head like a turning ball
  g.translate(W / 2, H / 2);
  g.rotate(roll * rad);
  const sx = Math.sin(yaw * rad) * 38, sy = -Math.sin(pitch * rad) * 38;
  g.fillStyle = face.face_found ? "#2c3440" : "#262a30";
  g.strokeStyle = face.face_found ? "#4fb3ff" : "#555c66";
  g.lineWidth = 2;
  g.beginPath(); g.ellipse(0, 0, 78, 98, 0, 0, 2 * Math.PI); g.fill(); g.stroke();
  g.translate(sx, sy);
  g.strokeStyle = "#d8dee6"; g.fillStyle = "#d8dee6"; g.lineWidth = 3; g.lineCap = "round";
  // eyes: viewer's left is the subject's right
  const eyes = [["Right", -30, face.eye_right || [0, 0]], ["Left", 30, face.eye_left || [0, 0]]];
  for (const [side, x, gaze] of eyes) {
    const open = Math.max(0.06, 1 - w["eyeBlink" + side]) * (1 + 0.4 * w["eyeWide" + side]) *
                 (1 - 0.35 * w["eyeSquint" + side]);
    g.beginPath(); g.ellipse(x, -18, 15, 10 * open, 0, 0, 2 * Math.PI); g.stroke();
    if (open > 0.2) {
      const px = Math.max(-9, Math.min(9, Math.sin(gaze[0] * rad) * 22));
      const py = Math.max(-5, Math.min(5, -Math.sin(gaze[1] * rad) * 22));
      g.beginPath(); g.arc(x + px, -18 + py * open, 4.5, 0, 2 * Math.PI); g.fill();
    }
    // brows
    const inner = w.browInnerUp * 10, outer = w["browOuterUp" + side] * 10, down = w["browDown" + side] * 8;
    const dir = x < 0 ? -1 : 1;
    g.beginPath();
    g.moveTo(x - dir * 6, -38 - inner + down);
    g.lineTo(x + dir * 18, -38 - outer + down * 0.4);
    g.stroke();
  }
  // cheeks
  if (w.cheekPuff > 0.05) {
    g.save(); g.globalAlpha = 0.25 + 0.5 * w.cheekPuff; g.fillStyle = "#ff9aa2";
    for (const x of [-48, 48]) { g.beginPath(); g.arc(x, 22, 10 + 8 * w.cheekPuff, 0, 2 * Math.PI); g.fill(); }
    g.restore();
  }
  // mouth: width from smile/stretch against pucker/funnel, opening from the jaw, corners from smile and frown
  const smile = (w.mouthSmileLeft + w.mouthSmileRight) / 2, frown = (w.mouthFrownLeft + w.mouthFrownRight) / 2;
  const stretch = (w.mouthStretchLeft + w.mouthStretchRight) / 2;
  const round = Math.max(w.mouthPucker, w.mouthFunnel);
  const half = 24 * (1 + 0.35 * smile + 0.25 * stretch - 0.45 * round);
  const open = 26 * w.jawOpen * (1 - 0.6 * w.mouthClose);
  const shift = (w.mouthLeft - w.mouthRight) * 10 * -1;
  const corner = (smile - frown) * 10;
  const my = 42 + 6 * w.jawOpen;
  g.beginPath();
  g.moveTo(shift - half, my - corner);
  g.quadraticCurveTo(shift, my - open * 0.3 + corner * 0.6 - w.mouthRollUpper * 3, shift + half, my - corner);
  g.quadraticCurveTo(shift, my + open + corner * 0.6, shift - half, my - corner);
  g.closePath();
  g.fillStyle = "#7a2f3a"; g.fill(); g.stroke();
  if (w.tongueOut > 0.05) {
    g.fillStyle = "#ff8591"; g.beginPath();
    g.ellipse(shift, my + open * 0.6 + 6 * w.tongueOut, 10, 6 + 8 * w.tongueOut, 0, 0, 2 * Math.PI); g.fill();
  }
  g.restore();
}
